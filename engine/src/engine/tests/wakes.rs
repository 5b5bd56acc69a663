//! No entry point consumes a wake and then abandons it; `auto_continue` holds on
//! every path; a submitted prompt is admitted only together with its claim.

use std::sync::Arc;
use std::time::Duration;

use pretty_assertions::assert_eq;

use super::{crashed_db, kinds, pending, wait_until, yes};
use crate::claim::{self, Acquire};
use crate::clock::{Clock, ManualClock, SharedClock, SystemClock};
use crate::config::Config;
use crate::coordinator::SessionOutcome;
use crate::error::Error;
use crate::events::Delivery;
use crate::ids;
use crate::runner::Outcome;
use crate::store::Store;
use crate::testing::{Answer, FakeProvider, Stage, TestDir, default_engine, engine};
use crate::tools::ToolRegistry;

async fn count(engine: &crate::Engine, sql: &'static str) -> i64 {
    engine
        .db()
        .read(move |c| Ok(c.query_row(sql, [], |r| r.get(0))?))
        .await
        .unwrap()
}

async fn recovery_wake_pending(engine: &crate::Engine, execution_id: &str) -> bool {
    let id = execution_id.to_string();
    engine
        .db()
        .read(move |c| {
            Ok(c.query_row(
                "SELECT wake_pending FROM session_recovery WHERE execution_id = ?1",
                [&id],
                |r| r.get::<_, i64>(0),
            )? == 1)
        })
        .await
        .unwrap()
}

fn no_auto_continue() -> Config {
    let mut config = Config::default();
    config.recovery.auto_continue = false;
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r5_7_a_shutdown_leaves_a_running_continuation_recoverable_never_cancelled() {
    let dir = TestDir::new();
    crashed_db(&dir, "ses_b", Stage::Tools, 60_000);
    // The continuation's step streams and then waits: it is mid-step at shutdown.
    let provider = FakeProvider::new(vec![Answer {
        text: vec!["resuming".into()],
        hold: true,
        ..Answer::default()
    }]);
    let first = default_engine(&dir, provider.clone()).await;
    first.recover().await.unwrap();
    let redrive = first.redrive_wakes().await.unwrap();
    assert_eq!(redrive.sessions, vec!["ses_b".to_string()]);
    wait_until("the continuation's step", async || provider.count() == 1).await;
    assert_eq!(first.shutdown().await.unwrap(), vec!["ses_b".to_string()]);
    // Nothing was cancelled: no `step.interrupted`, the redriven execution was
    // reconciled like a crash, and its own wake waits for the next launch.
    assert_eq!(
        count(
            &first,
            "SELECT count(*) FROM event WHERE type = 'step.interrupted'"
        )
        .await,
        0
    );
    assert_eq!(
        count(&first, "SELECT count(*) FROM session_execution").await,
        0
    );
    assert_eq!(
        count(
            &first,
            "SELECT count(*) FROM session_recovery WHERE wake_pending = 1 AND recovery_error IS NULL"
        )
        .await,
        1
    );
    drop(first);
    let provider = FakeProvider::new(vec![Answer::text("carried on")]);
    let second = default_engine(&dir, provider.clone()).await;
    second.redrive_wakes().await.unwrap();
    assert_eq!(
        second.wait_idle("ses_b").await,
        Some(SessionOutcome::Ran(Outcome::Idle))
    );
    assert_eq!(provider.count(), 1);
    assert_eq!(
        kinds(&second, "ses_b").await,
        vec![
            "user",
            "assistant",
            "synthetic:continuation",
            "assistant",
            "synthetic:continuation",
            "assistant"
        ]
    );
    second.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r5_7_continuing_one_execution_starts_no_other_sessions_wake() {
    let dir = TestDir::new();
    let a = crashed_db(&dir, "ses_a", Stage::Tools, 60_000);
    let b = crashed_db(&dir, "ses_b", Stage::Streaming, 60_000);
    let provider = FakeProvider::new(vec![Answer::text("continued")]);
    let engine = default_engine(&dir, provider.clone()).await;
    engine.recover().await.unwrap();
    let continued = engine.continue_execution(&a).await.unwrap();
    assert_eq!(continued.session_id, "ses_a");
    assert_eq!(
        engine.wait_idle("ses_a").await,
        Some(SessionOutcome::Ran(Outcome::Idle))
    );
    assert_eq!(provider.count(), 1);
    assert!(!engine.coordinator().is_running("ses_b"));
    assert!(
        recovery_wake_pending(&engine, &b).await,
        "b's wake was consumed"
    );
    assert_eq!(
        pending(&engine, "ses_b").await,
        vec![ids::continuation_input(&b)]
    );
    engine.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r5_9_redriving_leaves_recovery_wakes_alone_without_auto_continue() {
    let dir = TestDir::new();
    let exe = crashed_db(&dir, "ses_1", Stage::Tools, 60_000);
    let provider = FakeProvider::new(vec![Answer::text("continued")]);
    let engine = engine(
        &dir,
        SystemClock::shared(),
        no_auto_continue(),
        provider.clone(),
        ToolRegistry::standard(),
        yes(),
    )
    .await;
    engine.recover().await.unwrap();
    let redrive = engine.redrive_wakes().await.unwrap();
    assert_eq!((redrive.report.redriven, redrive.sessions.len()), (0, 0));
    assert_eq!(provider.count(), 0);
    assert!(recovery_wake_pending(&engine, &exe).await);
    engine.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r5_9_a_new_prompt_leaves_a_waiting_continuation_pending_without_auto_continue() {
    let dir = TestDir::new();
    let exe = crashed_db(&dir, "ses_1", Stage::Tools, 60_000);
    let provider = FakeProvider::new(vec![Answer::text("answered")]);
    let engine = engine(
        &dir,
        SystemClock::shared(),
        no_auto_continue(),
        provider.clone(),
        ToolRegistry::standard(),
        yes(),
    )
    .await;
    engine.recover().await.unwrap();
    engine.submit("ses_1", "something new").await.unwrap();
    assert_eq!(
        engine.wait_idle("ses_1").await,
        Some(SessionOutcome::Ran(Outcome::Idle))
    );
    assert_eq!(
        kinds(&engine, "ses_1").await,
        vec!["user", "assistant", "user", "assistant"]
    );
    assert_eq!(
        pending(&engine, "ses_1").await,
        vec![ids::continuation_input(&exe)],
        "the prompt promoted the continuation"
    );
    assert!(recovery_wake_pending(&engine, &exe).await);
    // The user's explicit wake still continues it.
    engine.continue_execution(&exe).await.unwrap();
    engine.wait_idle("ses_1").await;
    assert_eq!(pending(&engine, "ses_1").await, Vec::<String>::new());
    engine.shutdown().await.unwrap();
}

/// A session held by a live claim of `own_other`, expiring at `expires_at`.
fn held_by_other(dir: &TestDir, session: &str, now: i64, lease: i64) {
    let mut store = Store::open(&dir.database(), &SystemClock::new()).unwrap();
    store
        .write(|tx| {
            crate::store::events::append_unowned(
                tx,
                session,
                now,
                crate::events::Event::SessionCreated {
                    title: "t".into(),
                    directory: "/w".into(),
                },
            )?;
            match claim::acquire(tx, session, "own_other", now, lease)? {
                Acquire::Acquired(_) => Ok(()),
                other => panic!("{other:?}"),
            }
        })
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r4_3_a_prompt_for_a_session_held_by_another_live_owner_admits_nothing() {
    let dir = TestDir::new();
    let now = SystemClock::new().now_ms();
    held_by_other(&dir, "ses_1", now, 60_000);
    let provider = FakeProvider::new(vec![Answer::text("never")]);
    let engine = default_engine(&dir, provider.clone()).await;
    let events_before = count(&engine, "SELECT count(*) FROM event").await;
    let error = engine.submit("ses_1", "let me in").await.unwrap_err();
    assert!(
        matches!(&error, Error::SessionBusy { owner_id, .. } if owner_id == "own_other"),
        "{error:?}"
    );
    assert_eq!(
        count(&engine, "SELECT count(*) FROM event").await,
        events_before
    );
    assert_eq!(
        count(&engine, "SELECT count(*) FROM session_input").await,
        0,
        "a refused prompt was admitted"
    );
    assert_eq!(provider.count(), 0);
    engine.shutdown().await.unwrap();
}

/// Holds the writer busy until the returned sender is dropped or sent to.
async fn block_writer(engine: &crate::Engine) -> std::sync::mpsc::Sender<()> {
    let (release, released) = std::sync::mpsc::channel::<()>();
    let (started, has_started) = tokio::sync::oneshot::channel();
    let db = engine.db().clone();
    tokio::spawn(async move {
        db.with_conn(move |_| {
            let _ = started.send(());
            let _ = released.recv();
            Ok(())
        })
        .await
    });
    has_started.await.unwrap();
    release
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r4_3_a_claim_that_expires_while_the_writer_is_busy_is_not_reported_busy() {
    let dir = TestDir::new();
    let t0 = SystemClock::new().now_ms();
    held_by_other(&dir, "ses_1", t0, 30_000);
    let clock = ManualClock::shared(t0 + 10_000);
    let shared: SharedClock = clock.clone();
    let provider = FakeProvider::new(vec![Answer::text("got in")]);
    let engine = Arc::new(
        engine(
            &dir,
            shared,
            Config::default(),
            provider.clone(),
            ToolRegistry::standard(),
            yes(),
        )
        .await,
    );
    let release = block_writer(&engine).await;
    // The prompt is submitted while the other owner's claim is still live...
    let submitting = {
        let engine = engine.clone();
        tokio::spawn(async move { engine.submit("ses_1", "after the expiry").await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    // ...and the claim expires before the writer gets to the admission.
    clock.advance_ms(30_000);
    release.send(()).unwrap();
    let admitted = submitting.await.unwrap();
    assert!(admitted.is_ok(), "{admitted:?}");
    assert_eq!(
        engine.wait_idle("ses_1").await,
        Some(SessionOutcome::Ran(Outcome::Idle))
    );
    assert_eq!(provider.count(), 1);
    engine.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r4_3_a_prompt_for_a_quarantined_session_is_refused_and_admits_nothing() {
    let dir = TestDir::new();
    let exe = crashed_db(&dir, "ses_1", Stage::Tools, 60_000);
    {
        let store = Store::open(&dir.database(), &SystemClock::new()).unwrap();
        store
            .conn()
            .execute(
                "UPDATE session_execution SET recovery_error = 'held for a look' WHERE id = ?1",
                [&exe],
            )
            .unwrap();
    }
    let engine = default_engine(&dir, FakeProvider::new(vec![Answer::text("never")])).await;
    let before = count(&engine, "SELECT count(*) FROM session_input").await;
    let error = engine.submit("ses_1", "hello?").await.unwrap_err();
    let message = error.to_string();
    assert!(
        message.contains("quarantined") && message.contains(&exe),
        "{message}"
    );
    assert_eq!(
        count(&engine, "SELECT count(*) FROM session_input").await,
        before
    );
    engine.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r5_11_a_wake_is_rearmed_only_after_the_redrive_checks() {
    let dir = TestDir::new();
    let exe = crashed_db(&dir, "ses_1", Stage::Tools, 60_000);
    let engine = default_engine(&dir, FakeProvider::new(vec![Answer::text("never")])).await;
    engine.recover().await.unwrap();
    // A damaged row: its continuation names a user's queued prompt.
    let prompt = engine
        .admit("ses_1", "a queued prompt", Delivery::Admit)
        .await
        .unwrap();
    let (e, p) = (exe.clone(), prompt.id.clone());
    engine
        .db()
        .with_conn(move |c| {
            c.execute_batch("PRAGMA foreign_keys = OFF")?;
            c.execute(
                "UPDATE session_recovery SET continuation_message_id = ?2,
                     recovery_error = 'quarantined earlier', wake_pending = 0
                 WHERE execution_id = ?1",
                [&e, &p],
            )?;
            c.execute_batch("PRAGMA foreign_keys = ON")?;
            Ok(())
        })
        .await
        .unwrap();
    let error = engine
        .continue_execution(&exe)
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("is not derived from execution"), "{error}");
    assert!(pending(&engine, "ses_1").await.contains(&prompt.id));
    assert_eq!(
        count(
            &engine,
            "SELECT count(*) FROM event WHERE type = 'inspector.action'"
        )
        .await,
        0
    );
    engine.shutdown().await.unwrap();
}
