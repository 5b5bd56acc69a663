//! protocol §4 on a real (in-memory or temp-file) database with a manual clock.

use std::sync::Arc;
use std::time::Duration;

use pretty_assertions::assert_eq;
use rusqlite::Connection;

use super::*;
use crate::clock::{Clock, ManualClock};
use crate::events::Event;
use crate::message::Finish;
use crate::store::Store;
use crate::store::events::append_unowned;

const LEASE: i64 = 30_000;
const T0: i64 = 1_700_000_000_000;
const SESSION: &str = "ses_1";
const ME: &str = "own_me";

fn store_with_session() -> Store {
    let mut store = Store::open_in_memory(&ManualClock::new(T0)).unwrap();
    store
        .write(|tx| {
            append_unowned(
                tx,
                SESSION,
                T0,
                Event::SessionCreated {
                    title: "t".into(),
                    directory: "/".into(),
                },
            )
        })
        .unwrap();
    store
}

fn acquired(store: &mut Store, owner: &str, now: i64) -> Claim {
    match store
        .write(|tx| acquire(tx, SESSION, owner, now, LEASE))
        .unwrap()
    {
        Acquire::Acquired(claim) => claim,
        other => panic!("not acquired: {other:?}"),
    }
}

/// Every row of every table, as text: "nothing else written" means this is equal.
fn snapshot(conn: &Connection) -> Vec<String> {
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let mut out = Vec::new();
    for table in tables {
        let mut stmt = conn
            .prepare(&format!("SELECT * FROM {table} ORDER BY 1, 2"))
            .unwrap();
        let n = stmt.column_count();
        let rows = stmt
            .query_map([], |r| {
                (0..n)
                    .map(|i| r.get::<_, Value>(i).map(|v| format!("{v:?}")))
                    .collect::<Result<Vec<_>, _>>()
            })
            .unwrap();
        for row in rows {
            out.push(format!("{table}: {}", row.unwrap().join(" | ")));
        }
    }
    out
}

fn claim_row_of(store: &Store, execution_id: &str) -> Option<ClaimRow> {
    get(store.conn(), execution_id).unwrap()
}

type WriteFn = fn(&Transaction<'_>, &Claim, i64) -> Result<()>;

fn write_functions() -> Vec<(&'static str, WriteFn)> {
    vec![
        ("renew", |tx, c, now| renew(tx, c, now, LEASE)),
        ("append", |tx, c, now| {
            Fenced::check(tx, c, now)?
                .append(Event::StepStarted {
                    tools: None,
                    message_id: "msg_a".into(),
                    execution_id: c.execution_id.clone(),
                    provider: "p".into(),
                    model: "m".into(),
                })
                .map(drop)
        }),
        ("change_phase", |tx, c, now| {
            Fenced::check(tx, c, now)?
                .change_phase(PhaseChange::Dispatched)
                .map(drop)
        }),
        ("set_assistant", |tx, c, now| {
            Fenced::check(tx, c, now)?.set_assistant("msg_x")
        }),
        ("unset_assistant", |tx, c, now| {
            let mut f = Fenced::check(tx, c, now)?;
            f.append(Event::StepStarted {
                tools: None,
                message_id: "msg_a".into(),
                execution_id: c.execution_id.clone(),
                provider: "p".into(),
                model: "m".into(),
            })?;
            f.unset_assistant()
        }),
        ("clear", |tx, c, now| {
            Fenced::check(tx, c, now)?.clear().map(drop)
        }),
        ("cancel", |tx, c, now| {
            Fenced::check(tx, c, now)?.cancel(None).map(drop)
        }),
    ]
}

#[test]
fn r4_4_every_write_function_matches_exactly_one_claim_or_writes_nothing() {
    type Spoil = fn(&mut Store, &mut Claim, &mut i64);
    let spoilers: Vec<(&str, Spoil)> = vec![
        ("expired", |_, _, now| *now += LEASE),
        ("wrong owner", |_, c, _| c.owner_id = "own_other".into()),
        ("wrong epoch", |_, c, _| c.epoch += 1),
        ("wrong execution", |_, c, _| {
            c.execution_id = "exe_other".into()
        }),
        ("missing row", |s, c, _| {
            s.conn()
                .execute(
                    "DELETE FROM session_execution WHERE id = ?1",
                    [&c.execution_id],
                )
                .unwrap();
        }),
    ];
    for (name, write) in write_functions() {
        // The correct claim: exactly its own row changes, and the call succeeds.
        let mut store = store_with_session();
        let claim = acquired(&mut store, ME, T0);
        let before = snapshot(store.conn());
        let at = T0 + 1_000;
        store
            .write(|tx| write(tx, &claim, at))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_ne!(snapshot(store.conn()), before, "{name} wrote nothing");

        for (how, spoil) in &spoilers {
            let mut store = store_with_session();
            let mut claim = acquired(&mut store, ME, T0);
            let mut now = T0 + 1_000;
            spoil(&mut store, &mut claim, &mut now);
            let before = snapshot(store.conn());
            let result = store.write(|tx| write(tx, &claim, now));
            assert!(
                matches!(result, Err(Error::FenceLost { .. })),
                "{name} with {how}: {result:?}"
            );
            assert_eq!(
                snapshot(store.conn()),
                before,
                "{name} with {how} wrote something"
            );
        }
    }
}

#[test]
fn r4_3_acquire_snapshots_the_latest_assistant_seq() {
    let mut store = store_with_session();
    let claim = acquired(&mut store, ME, T0);
    let row = claim_row_of(&store, &claim.execution_id).unwrap();
    assert_eq!(
        (row.phase(), integer(&row.assistant_seq)),
        (Some(Phase::Ready), Some(-1))
    );
    assert_eq!(row.expires_at(), Some(T0 + LEASE));
    store
        .write(|tx| {
            let mut f = Fenced::check(tx, &claim, T0)?;
            f.append(Event::StepStarted {
                tools: None,
                message_id: "msg_a".into(),
                execution_id: claim.execution_id.clone(),
                provider: "p".into(),
                model: "m".into(),
            })?;
            f.clear()
        })
        .unwrap();
    let next = acquired(&mut store, ME, T0 + 1);
    let row = claim_row_of(&store, &next.execution_id).unwrap();
    assert_eq!(integer(&row.assistant_seq), Some(1));
}

#[test]
fn r4_4_events_record_the_owner_execution_and_epoch_they_were_written_under() {
    let mut store = store_with_session();
    let claim = acquired(&mut store, ME, T0);
    let record = store
        .write(|tx| {
            Fenced::check(tx, &claim, T0)?.append(Event::StepStarted {
                tools: None,
                message_id: "msg_a".into(),
                execution_id: claim.execution_id.clone(),
                provider: "p".into(),
                model: "m".into(),
            })
        })
        .unwrap();
    let stored: (String, String, i64) = store
        .conn()
        .query_row(
            "SELECT owner_id, execution_id, epoch FROM event WHERE seq = ?1",
            [record.seq],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!(stored, (ME.to_string(), claim.execution_id.clone(), 0));
}

#[test]
fn i3_never_start_a_second_owner_while_a_lease_is_live() {
    let mut store = store_with_session();
    let claim = acquired(&mut store, "own_a", T0);
    let mut now = T0;
    for _ in 0..10 {
        now += LEASE / 3;
        store.write(|tx| renew(tx, &claim, now, LEASE)).unwrap();
        let result = store
            .write(|tx| acquire(tx, SESSION, "own_b", now, LEASE))
            .unwrap();
        let Acquire::Busy(row) = result else {
            panic!("second owner got {result:?}")
        };
        assert_eq!(row.owner_id, "own_a");
    }
}

#[test]
fn i4_never_overwrite_an_expired_claim_on_acquisition() {
    let mut store = store_with_session();
    let claim = acquired(&mut store, "own_a", T0);
    let before = snapshot(store.conn());
    let later = T0 + LEASE;
    let result = store
        .write(|tx| acquire(tx, SESSION, "own_b", later, LEASE))
        .unwrap();
    let Acquire::Expired(row) = result else {
        panic!("got {result:?}")
    };
    assert_eq!(
        (row.id, row.owner_id),
        (claim.execution_id, "own_a".to_string())
    );
    assert_eq!(
        snapshot(store.conn()),
        before,
        "acquisition touched the expired claim"
    );
}

#[test]
fn i5_never_reenter_an_own_uncertain_live_claim() {
    let mut store = store_with_session();
    let claim = acquired(&mut store, ME, T0);
    store
        .write(|tx| Fenced::check(tx, &claim, T0)?.change_phase(PhaseChange::Dispatched))
        .unwrap();
    // The execution task died with the claim live and uncertain: the same owner is
    // told "busy", and nothing changes, until the lease runs out.
    let before = snapshot(store.conn());
    let again = store
        .write(|tx| acquire(tx, SESSION, ME, T0 + 1, LEASE))
        .unwrap();
    assert!(
        matches!(&again, Acquire::Busy(row) if row.id == claim.execution_id),
        "{again:?}"
    );
    assert_eq!(snapshot(store.conn()), before);
    let expired = store
        .write(|tx| acquire(tx, SESSION, ME, T0 + LEASE, LEASE))
        .unwrap();
    assert!(matches!(expired, Acquire::Expired(_)), "{expired:?}");
}

#[test]
fn i6_heartbeat_never_revives_an_expired_claim() {
    let mut store = store_with_session();
    let claim = acquired(&mut store, ME, T0);
    for late in [T0 + LEASE, T0 + LEASE + 1, T0 + 10 * LEASE] {
        let result = store.write(|tx| renew(tx, &claim, late, LEASE));
        assert!(matches!(result, Err(Error::FenceLost { .. })), "{result:?}");
        let row = claim_row_of(&store, &claim.execution_id).unwrap();
        assert_eq!(row.expires_at(), Some(T0 + LEASE));
    }
}

#[test]
fn i6_a_stale_owner_never_renews_after_a_takeover() {
    let mut store = store_with_session();
    let claim = acquired(&mut store, "own_a", T0);
    let later = T0 + LEASE;
    let row = claim_row_of(&store, &claim.execution_id).unwrap();
    let taken = store
        .write(|tx| takeover(tx, &row, "own_b", later, LEASE, 5_000))
        .unwrap()
        .expect("takeover");
    assert_eq!(taken.epoch, 1);
    // The new lease is live, but it is not the stale owner's.
    let stale = store.write(|tx| renew(tx, &claim, later + 1, LEASE));
    assert!(matches!(stale, Err(Error::FenceLost { .. })));
    store
        .write(|tx| renew(tx, &taken, later + 1, LEASE))
        .unwrap();
}

#[test]
fn r5_3_takeover_happens_once_and_only_when_expired() {
    let mut store = store_with_session();
    let claim = acquired(&mut store, "own_a", T0);
    let row = claim_row_of(&store, &claim.execution_id).unwrap();
    let live = store
        .write(|tx| takeover(tx, &row, "own_b", T0 + 1, LEASE, 5_000))
        .unwrap();
    assert_eq!(live, None, "took over a live claim");
    let first = store
        .write(|tx| takeover(tx, &row, "own_b", T0 + LEASE, LEASE, 5_000))
        .unwrap();
    assert!(first.is_some());
    let second = store
        .write(|tx| takeover(tx, &row, "own_c", T0 + 3 * LEASE, LEASE, 5_000))
        .unwrap();
    assert_eq!(second, None, "the same read was taken over twice");
}

#[test]
fn i7_runner_settlement_never_overwrites_a_cancellation() {
    let mut store = store_with_session();
    let claim = acquired(&mut store, ME, T0);
    store
        .write(|tx| {
            let mut f = Fenced::check(tx, &claim, T0)?;
            f.append(Event::StepStarted {
                tools: None,
                message_id: "msg_a".into(),
                execution_id: claim.execution_id.clone(),
                provider: "p".into(),
                model: "m".into(),
            })?;
            f.set_assistant("msg_a")?;
            f.change_phase(PhaseChange::Dispatched).map(drop)
        })
        .unwrap();
    store
        .write(|tx| Fenced::check(tx, &claim, T0 + 1)?.cancel(Some("msg_a")))
        .unwrap();
    let before = snapshot(store.conn());
    // The provider stream finishes after the cancellation: its settlement is fenced off.
    let settled = store.write(|tx| {
        let mut f = Fenced::check(tx, &claim, T0 + 2)?;
        f.append(Event::StepEnded {
            warnings: Vec::new(),
            message_id: "msg_a".into(),
            finish: Finish::Stop,
            usage: None,
        })?;
        f.change_phase(PhaseChange::StepSettled).map(drop)
    });
    assert!(
        matches!(settled, Err(Error::FenceLost { .. })),
        "{settled:?}"
    );
    assert_eq!(snapshot(store.conn()), before);
    let message = crate::store::rows::message(store.conn(), "msg_a")
        .unwrap()
        .unwrap();
    let assistant = message.data.as_assistant().unwrap();
    assert_eq!(assistant.finish, Some(Finish::Error));
    assert_eq!(
        assistant.error.as_ref().unwrap().message,
        "Session execution interrupted"
    );
}

#[test]
fn i12_cancellation_is_atomic() {
    let mut store = store_with_session();
    let claim = acquired(&mut store, ME, T0);
    let before = snapshot(store.conn());
    // Cancelling against an assistant that does not exist fails as a whole: no event,
    // and the claim is still there.
    let failed = store.write(|tx| Fenced::check(tx, &claim, T0)?.cancel(Some("msg_missing")));
    assert!(failed.is_err());
    assert_eq!(snapshot(store.conn()), before);
    store
        .write(|tx| Fenced::check(tx, &claim, T0)?.cancel(None))
        .unwrap();
    assert_eq!(claim_row_of(&store, &claim.execution_id), None);
    let kinds: Vec<String> = store
        .conn()
        .prepare("SELECT type FROM event ORDER BY seq")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(kinds, vec!["session.created", "step.interrupted"]);
}

#[test]
fn i12_later_cleanup_never_deletes_a_successors_claim() {
    let mut store = store_with_session();
    let old = acquired(&mut store, ME, T0);
    store
        .write(|tx| Fenced::check(tx, &old, T0)?.cancel(None))
        .unwrap();
    let successor = acquired(&mut store, ME, T0 + 1);
    let before = snapshot(store.conn());
    let cleanup_clear = store.write(|tx| Fenced::check(tx, &old, T0 + 2)?.clear());
    assert!(matches!(cleanup_clear, Err(Error::FenceLost { .. })));
    let cleanup_delete = store.write(|tx| delete_exact(tx, &old));
    assert!(matches!(cleanup_delete, Err(Error::FenceLost { .. })));
    assert_eq!(snapshot(store.conn()), before);
    assert!(claim_row_of(&store, &successor.execution_id).is_some());
}

#[test]
fn r4_7_clear_waits_for_an_input_admitted_at_the_last_moment() {
    let mut store = store_with_session();
    let claim = acquired(&mut store, ME, T0);
    store
        .write(|tx| {
            append_unowned(
                tx,
                SESSION,
                T0,
                Event::InputAdmitted {
                    content: Vec::new(),
                    input_id: "inp_late".into(),
                    prompt: "one more thing".into(),
                    delivery: crate::events::Delivery::Queue,
                    wake_pending: true,
                    continuation_of: None,
                },
            )
        })
        .unwrap();
    let cleared = store
        .write(|tx| Fenced::check(tx, &claim, T0)?.clear())
        .unwrap();
    assert_eq!(cleared, Cleared::WakePending);
    assert!(claim_row_of(&store, &claim.execution_id).is_some());
    store
        .write(|tx| {
            Fenced::check(tx, &claim, T0)?.append(Event::InputPromoted {
                input_id: "inp_late".into(),
                message_id: "msg_late".into(),
            })
        })
        .unwrap();
    let cleared = store
        .write(|tx| Fenced::check(tx, &claim, T0)?.clear())
        .unwrap();
    assert_eq!(cleared, Cleared::Done);
}

#[test]
fn r4_6_phase_changes_go_through_the_transition_function() {
    let mut store = store_with_session();
    let claim = acquired(&mut store, ME, T0);
    let phases = store
        .write(|tx| {
            let mut f = Fenced::check(tx, &claim, T0)?;
            let a = f.change_phase(PhaseChange::Dispatched)?;
            let refused = f.change_phase(PhaseChange::WorkStarted).is_err();
            let b = f.change_phase(PhaseChange::StepSettled)?;
            Ok((a, refused, b))
        })
        .unwrap();
    assert_eq!(phases, (Phase::Unknown, true, Phase::Ready));
}

#[test]
fn r4_4a_the_self_fence_closes_before_the_lease_runs_out() {
    let clock = ManualClock::shared(T0);
    let lease = Duration::from_millis(LEASE as u64);
    let fence = SelfFence::new(clock.clone(), lease, clock.monotonic());
    assert!(fence.holds());
    clock.advance(lease - lease / 5 - Duration::from_millis(1));
    assert!(fence.holds());
    clock.advance_ms(1);
    assert!(!fence.holds(), "dispatch allowed past lease minus margin");
    fence.renewed(clock.monotonic());
    assert!(fence.holds());
    // A late answer from an older renewal never moves the deadline back.
    fence.renewed(Duration::ZERO);
    assert!(fence.holds());
}

#[test]
fn r4_10_a_clock_jump_forward_expires_leases_and_fences_writes() {
    let clock = ManualClock::new(T0);
    let mut store = store_with_session();
    let claim = acquired(&mut store, ME, clock.now_ms());
    clock.jump_wall(3_600_000);
    let result = store.write(|tx| Fenced::check(tx, &claim, clock.now_ms()).map(drop));
    assert!(matches!(result, Err(Error::FenceLost { .. })));
    let renewed = store.write(|tx| renew(tx, &claim, clock.now_ms(), LEASE));
    assert!(matches!(renewed, Err(Error::FenceLost { .. })));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r4_2_a_real_heartbeat_keeps_a_short_lease_alive_and_a_stopped_one_expires() {
    // Real time is the subject here: a 900 ms lease renewed every 150 ms (a commit
    // on a busy disk can take a few hundred milliseconds).
    let dir = tempfile::tempdir().unwrap();
    let clock: SharedClock = crate::clock::SystemClock::shared();
    let db = crate::db::Db::open(&dir.path().join("steward.db"), clock.as_ref()).unwrap();
    let lease = Duration::from_millis(900);
    let now = clock.now_ms();
    let claim = db
        .write(move |tx| {
            append_unowned(
                tx,
                SESSION,
                now,
                Event::SessionCreated {
                    title: "t".into(),
                    directory: "/".into(),
                },
            )?;
            match acquire(tx, SESSION, ME, now, 900)? {
                Acquire::Acquired(c) => Ok(c),
                other => Err(Error::Invalid(format!("{other:?}"))),
            }
        })
        .await
        .unwrap();
    let fence = Arc::new(SelfFence::new(clock.clone(), lease, clock.monotonic()));
    let lost = tokio_util::sync::CancellationToken::new();
    let beat = heartbeat::Heartbeat::spawn(heartbeat::HeartbeatParams {
        db: db.clone(),
        claim: claim.clone(),
        clock: clock.clone(),
        lease,
        interval: Duration::from_millis(150),
        self_fence: fence.clone(),
        lost: lost.clone(),
    });
    let state = |db: crate::db::Db, id: String, clock: SharedClock| async move {
        db.read(move |conn| Ok(get(conn, &id)?.map(|r| r.state(clock.now_ms()))))
            .await
            .unwrap()
    };
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert_eq!(
            state(db.clone(), claim.execution_id.clone(), clock.clone()).await,
            Some(ClaimState::Live)
        );
        assert!(fence.holds());
    }
    assert!(!lost.is_cancelled());
    beat.stop().await;
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    assert_eq!(
        state(db.clone(), claim.execution_id.clone(), clock.clone()).await,
        Some(ClaimState::Expired)
    );
    assert!(!fence.holds());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r4_2_zero_rows_on_a_heartbeat_cancels_the_execution_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let clock: SharedClock = crate::clock::SystemClock::shared();
    let db = crate::db::Db::open(&dir.path().join("steward.db"), clock.as_ref()).unwrap();
    let now = clock.now_ms();
    let claim = db
        .write(move |tx| {
            append_unowned(
                tx,
                SESSION,
                now,
                Event::SessionCreated {
                    title: "t".into(),
                    directory: "/".into(),
                },
            )?;
            match acquire(tx, SESSION, ME, now, 30_000)? {
                Acquire::Acquired(c) => Ok(c),
                other => Err(Error::Invalid(format!("{other:?}"))),
            }
        })
        .await
        .unwrap();
    let lost = tokio_util::sync::CancellationToken::new();
    let lease = Duration::from_secs(30);
    let beat = heartbeat::Heartbeat::spawn(heartbeat::HeartbeatParams {
        db: db.clone(),
        claim: claim.clone(),
        clock: clock.clone(),
        lease,
        interval: Duration::from_millis(20),
        self_fence: Arc::new(SelfFence::new(clock.clone(), lease, clock.monotonic())),
        lost: lost.clone(),
    });
    // Someone else's transaction removes the claim (as a takeover would).
    let id = claim.execution_id.clone();
    db.with_conn(move |conn| {
        conn.execute("DELETE FROM session_execution WHERE id = ?1", [id])?;
        Ok(())
    })
    .await
    .unwrap();
    tokio::time::timeout(Duration::from_secs(2), lost.cancelled())
        .await
        .expect("ownership loss was not noticed");
    beat.stop().await;
}

#[test]
fn busy_database_waits_within_the_timeout_and_then_fails_retryably() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("steward.db");
    let clock = ManualClock::new(T0);
    let mut store = Store::open(&path, &clock).unwrap();
    let hold = |millis: u64| {
        let path = path.clone();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let handle = std::thread::spawn(move || {
            let other = Connection::open(&path).unwrap();
            other.execute_batch("BEGIN IMMEDIATE").unwrap();
            ready_tx.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(millis));
            other.execute_batch("COMMIT").unwrap();
        });
        ready_rx.recv().unwrap();
        handle
    };
    // Held for 200 ms: the write waits (busy_timeout is 5 s) and succeeds.
    let holder = hold(200);
    store
        .write(|tx| {
            append_unowned(
                tx,
                SESSION,
                T0,
                Event::SessionCreated {
                    title: "t".into(),
                    directory: "/".into(),
                },
            )
        })
        .expect("a brief lock is waited out");
    holder.join().unwrap();
    // Held past the timeout: a typed, retryable error, and nothing written.
    store
        .conn()
        .busy_timeout(Duration::from_millis(100))
        .unwrap();
    let holder = hold(1_000);
    let result = store.write(|tx| acquire(tx, SESSION, ME, T0, LEASE));
    assert!(matches!(result, Err(Error::StoreBusy)), "{result:?}");
    assert!(result.unwrap_err().is_retryable());
    holder.join().unwrap();
    assert_eq!(for_session(store.conn(), SESSION).unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i6_a_renewal_delayed_behind_a_busy_writer_never_revives_an_expired_claim() {
    let dir = tempfile::tempdir().unwrap();
    let manual = ManualClock::shared(T0);
    let clock: SharedClock = manual.clone();
    let db = crate::db::Db::open(&dir.path().join("steward.db"), clock.as_ref()).unwrap();
    let claim = db
        .write(move |tx| {
            append_unowned(
                tx,
                SESSION,
                T0,
                Event::SessionCreated {
                    title: "t".into(),
                    directory: "/".into(),
                },
            )?;
            match acquire(tx, SESSION, ME, T0, LEASE)? {
                Acquire::Acquired(c) => Ok(c),
                other => Err(Error::Invalid(format!("{other:?}"))),
            }
        })
        .await
        .unwrap();
    // Two thirds into the lease, the writer is held busy (a long transaction, a
    // slow fsync)...
    manual.advance_ms(20_000);
    let (release, released) = std::sync::mpsc::channel::<()>();
    let (started, has_started) = tokio::sync::oneshot::channel();
    let writer = db.clone();
    let blocker = tokio::spawn(async move {
        writer
            .with_conn(move |_| {
                let _ = started.send(());
                let _ = released.recv();
                Ok(())
            })
            .await
    });
    has_started.await.unwrap();
    let lost = tokio_util::sync::CancellationToken::new();
    let lease = Duration::from_millis(LEASE as u64);
    let beat = heartbeat::Heartbeat::spawn(heartbeat::HeartbeatParams {
        db: db.clone(),
        claim: claim.clone(),
        clock: clock.clone(),
        lease,
        interval: Duration::from_millis(20),
        self_fence: Arc::new(SelfFence::new(clock.clone(), lease, clock.monotonic())),
        lost: lost.clone(),
    });
    // ...while the heartbeat queues its renewal, and the lease runs out.
    tokio::time::sleep(Duration::from_millis(100)).await;
    manual.advance_ms(10_001);
    release.send(()).unwrap();
    blocker.await.unwrap().unwrap();
    tokio::time::timeout(Duration::from_secs(2), lost.cancelled())
        .await
        .expect("the delayed renewal revived the claim");
    beat.stop().await;
    let id = claim.execution_id.clone();
    let expires_at = db
        .read(move |conn| Ok(get(conn, &id)?.and_then(|r| r.expires_at())))
        .await
        .unwrap();
    assert_eq!(expires_at, Some(T0 + LEASE));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i6_a_renewal_waiting_for_another_processs_lock_never_revives_an_expired_claim() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("steward.db");
    let manual = ManualClock::shared(T0);
    let clock: SharedClock = manual.clone();
    let db = crate::db::Db::open(&path, clock.as_ref()).unwrap();
    let claim = db
        .write(move |tx| {
            append_unowned(
                tx,
                SESSION,
                T0,
                Event::SessionCreated {
                    title: "t".into(),
                    directory: "/".into(),
                },
            )?;
            match acquire(tx, SESSION, ME, T0, LEASE)? {
                Acquire::Acquired(c) => Ok(c),
                other => Err(Error::Invalid(format!("{other:?}"))),
            }
        })
        .await
        .unwrap();
    manual.advance_ms(20_000);
    // Another process holds the write lock (a long transaction elsewhere).
    let other = rusqlite::Connection::open(&path).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let lost = tokio_util::sync::CancellationToken::new();
    let lease = Duration::from_millis(LEASE as u64);
    let beat = heartbeat::Heartbeat::spawn(heartbeat::HeartbeatParams {
        db: db.clone(),
        claim: claim.clone(),
        clock: clock.clone(),
        lease,
        interval: Duration::from_millis(20),
        self_fence: Arc::new(SelfFence::new(clock.clone(), lease, clock.monotonic())),
        lost: lost.clone(),
    });
    // The renewal is now waiting for that lock; the lease runs out meanwhile.
    tokio::time::sleep(Duration::from_millis(200)).await;
    manual.advance_ms(10_001);
    other.execute_batch("COMMIT").unwrap();
    tokio::time::timeout(Duration::from_secs(3), lost.cancelled())
        .await
        .expect("the delayed renewal revived the claim");
    beat.stop().await;
    let id = claim.execution_id.clone();
    let expires_at = db
        .read(move |conn| Ok(get(conn, &id)?.and_then(|r| r.expires_at())))
        .await
        .unwrap();
    assert_eq!(expires_at, Some(T0 + LEASE));
}
