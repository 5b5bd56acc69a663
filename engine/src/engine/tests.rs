//! Recovery through the engine: redrive scope, exactly-once wakes, the background
//! timer and doorbell, `auto_continue`.

use std::sync::Arc;
use std::time::Duration;

use pretty_assertions::assert_eq;

use crate::Engine;
use crate::clock::{Clock, SharedClock, SystemClock};
use crate::config::Config;
use crate::coordinator::SessionOutcome;
use crate::events::Delivery;
use crate::ids;
use crate::message::{MessageData, SyntheticKind};
use crate::runner::Outcome;
use crate::store::{Store, rows, sessions};
use crate::testing::{Answer, FakeProvider, Stage, TestDir, default_engine, engine, interrupted};
use crate::tools::{Headless, ToolRegistry};

fn yes() -> Arc<Headless> {
    Arc::new(Headless { allow_all: true })
}

/// A database with one execution interrupted `ago_ms` ago (owner unknown).
fn crashed_db(dir: &TestDir, session: &str, stage: Stage, ago_ms: i64) -> String {
    let clock = SystemClock::new();
    let mut store = Store::open(&dir.database(), &clock).unwrap();
    interrupted(&mut store, session, stage, clock.now_ms() - ago_ms)
}

async fn pending(engine: &Engine, session: &str) -> Vec<String> {
    let s = session.to_string();
    engine
        .db()
        .read(move |c| rows::pending_inputs(c, &s))
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.id)
        .collect()
}

async fn kinds(engine: &Engine, session: &str) -> Vec<String> {
    let s = session.to_string();
    engine
        .db()
        .read(move |c| rows::messages(c, &s))
        .await
        .unwrap()
        .into_iter()
        .map(|m| match &m.data {
            MessageData::Synthetic(s) => format!("synthetic:{:?}", s.kind).to_lowercase(),
            other => other.kind().as_str().to_string(),
        })
        .collect()
}

async fn wait_until(what: &str, mut check: impl AsyncFnMut() -> bool) {
    tokio::time::timeout(Duration::from_secs(10), async {
        while !check().await {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("timed out waiting for {what}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i10_recovery_redrive_never_promotes_unrelated_pending_inputs() {
    let dir = TestDir::new();
    let exe = crashed_db(&dir, "ses_1", Stage::Tools, 60_000);
    let provider = FakeProvider::new(vec![Answer::text("carrying on")]);
    let engine = default_engine(&dir, provider.clone()).await;
    let report = engine.recover().await.unwrap();
    assert_eq!(report.recovered.len(), 1);
    let note = engine
        .admit("ses_1", "a note for later", Delivery::Admit)
        .await
        .unwrap();
    let redrive = engine.redrive_wakes().await.unwrap();
    assert_eq!(
        (redrive.report.redriven, redrive.sessions.clone()),
        (1, vec!["ses_1".to_string()])
    );
    assert_eq!(
        engine.wait_idle("ses_1").await,
        Some(SessionOutcome::Ran(Outcome::Idle))
    );
    assert_eq!(
        pending(&engine, "ses_1").await,
        vec![note.id],
        "the redrive promoted an unrelated input"
    );
    assert_eq!(provider.count(), 1);
    let messages = kinds(&engine, "ses_1").await;
    assert_eq!(
        messages,
        vec!["user", "assistant", "synthetic:continuation", "assistant"]
    );
    let request = provider.requests.lock().unwrap()[0].clone();
    assert!(
        request.step_index == 1,
        "the continuation step replayed entry {}",
        request.step_index
    );
    assert!(!ids::continuation_input(&exe).is_empty());
    engine.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i11_a_crash_between_recovery_commit_and_wake_is_redriven_exactly_once() {
    let dir = TestDir::new();
    crashed_db(&dir, "ses_1", Stage::Streaming, 60_000);
    let provider = FakeProvider::new(vec![Answer::text("continued")]);
    let first = default_engine(&dir, provider.clone()).await;
    assert_eq!(first.recover().await.unwrap().recovered.len(), 1);
    // The process "dies" here: no wake was started.
    drop(first);
    // Two relaunches redrive at the same moment.
    let a = default_engine(&dir, provider.clone()).await;
    let b = default_engine(&dir, provider.clone()).await;
    let (ra, rb) = tokio::join!(a.redrive_wakes(), b.redrive_wakes());
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    let oa = a.wait_idle("ses_1").await;
    let ob = b.wait_idle("ses_1").await;
    assert!(
        ra.report.redriven + rb.report.redriven >= 1,
        "{ra:?} {rb:?} {oa:?} {ob:?}"
    );
    assert_eq!(provider.count(), 1, "the continuation ran more than once");
    let messages = kinds(&a, "ses_1").await;
    assert_eq!(
        messages
            .iter()
            .filter(|k| *k == "synthetic:continuation")
            .count(),
        1,
        "{messages:?}"
    );
    // And a later launch finds nothing left to wake.
    let c = default_engine(&dir, provider.clone()).await;
    assert_eq!(c.redrive_wakes().await.unwrap().report.redriven, 0);
    for e in [a, b, c] {
        e.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r5_1_the_background_timer_recovers_a_claim_when_it_expires() {
    let dir = TestDir::new();
    // Interrupted so recently that its lease (30 s) ends in 400 ms; its owner is
    // unknown, so only time can expire it.
    crashed_db(&dir, "ses_1", Stage::Tools, 30_000 - 400);
    let provider = FakeProvider::new(vec![Answer::text("continued")]);
    let clock: SharedClock = SystemClock::shared();
    let engine = engine(
        &dir,
        clock,
        Config::default(),
        provider.clone(),
        ToolRegistry::standard(),
        yes(),
    )
    .await;
    assert_eq!(
        engine.recover().await.unwrap().recovered.len(),
        0,
        "recovered a live lease"
    );
    let started = std::time::Instant::now();
    engine.start_background(crate::engine::Redriving::DueWakes);
    wait_until("the continuation", async || provider.count() == 1).await;
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(300),
        "recovered before expiry: {waited:?}"
    );
    assert!(
        waited < Duration::from_secs(3),
        "the timer was late: {waited:?}"
    );
    engine.wait_idle("ses_1").await;
    engine.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r5_9_without_auto_continue_the_wake_waits_for_the_user() {
    let dir = TestDir::new();
    crashed_db(&dir, "ses_1", Stage::Tools, 60_000);
    let provider = FakeProvider::new(vec![Answer::text("continued")]);
    let mut config = Config::default();
    config.recovery.auto_continue = false;
    let engine = engine(
        &dir,
        SystemClock::shared(),
        config,
        provider.clone(),
        ToolRegistry::standard(),
        yes(),
    )
    .await;
    engine.start_background(crate::engine::Redriving::DueWakes);
    wait_until("the reconciliation", async || {
        engine
            .db()
            .read(crate::inspect::recoveries)
            .await
            .unwrap()
            .len()
            == 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(provider.count(), 0);
    let recovery = engine.db().read(crate::inspect::recoveries).await.unwrap();
    assert!(
        recovery[0].wake_pending,
        "the wake should stay pending for the user"
    );
    engine.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r4_3_an_acquisition_that_meets_an_expired_claim_hands_it_to_recovery_first() {
    let dir = TestDir::new();
    crashed_db(&dir, "ses_1", Stage::Streaming, 60_000);
    let provider = FakeProvider::new(vec![Answer::text("answer")]);
    let engine = default_engine(&dir, provider.clone()).await;
    engine
        .admit("ses_1", "and now?", Delivery::Queue)
        .await
        .unwrap();
    assert_eq!(
        engine.wait_idle("ses_1").await,
        Some(SessionOutcome::Ran(Outcome::Idle))
    );
    // Reconciled before the new execution; both pending inputs are promoted in
    // admitted order (the prompt came first) and answered once.
    assert_eq!(
        kinds(&engine, "ses_1").await,
        vec![
            "user",
            "assistant",
            "user",
            "synthetic:continuation",
            "assistant"
        ]
    );
    assert_eq!(provider.count(), 1);
    engine.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r4_inputs_admitted_by_another_process_are_picked_up() {
    let dir = TestDir::new();
    let provider = FakeProvider::new(vec![Answer::text("heard you")]);
    let engine = default_engine(&dir, provider.clone()).await;
    let session = engine.create_session("t", &dir.work()).await.unwrap();
    engine.start_background(crate::engine::Redriving::DueWakes);
    // Another process admits an input and dies before waking anything.
    let mut other = Store::open(&dir.database(), &SystemClock::new()).unwrap();
    let now = SystemClock::new().now_ms();
    other
        .write(|tx| sessions::admit(tx, &session.id, "from elsewhere", Delivery::Queue, now))
        .unwrap();
    drop(other);
    let started = std::time::Instant::now();
    wait_until("the pickup", async || provider.count() == 1).await;
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    engine.wait_idle(&session.id).await;
    assert_eq!(kinds(&engine, &session.id).await, vec!["user", "assistant"]);
    engine.shutdown().await.unwrap();
}

#[test]
fn synthetic_kind_names_are_lowercase() {
    assert_eq!(
        format!("{:?}", SyntheticKind::Continuation).to_lowercase(),
        "continuation"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r4_10_a_clock_jump_forward_stops_a_live_owner_and_recovery_reconciles_once() {
    use crate::clock::ManualClock;
    use crate::events::Delivery;
    let dir = TestDir::new();
    let clock = ManualClock::shared(1_700_000_000_000);
    let mut config = Config::default();
    config.lease.heartbeat_ms = Some(50);
    let provider = FakeProvider::new(vec![Answer {
        text: vec!["started".into()],
        hold: true,
        ..Answer::default()
    }]);
    let a = engine(
        &dir,
        clock.clone(),
        config.clone(),
        provider.clone(),
        ToolRegistry::standard(),
        yes(),
    )
    .await;
    let session = a.create_session("t", &dir.work()).await.unwrap();
    let mut events = a.subscribe();
    a.admit(&session.id, "go", Delivery::Queue).await.unwrap();
    crate::testing::committed(&mut events, "step.text").await;
    // An hour passes on the wall clock only (a suspended laptop, a clock change).
    clock.jump_wall(3_600_000);
    assert_eq!(
        a.wait_idle(&session.id).await,
        Some(SessionOutcome::Ran(Outcome::Lost))
    );
    let before = kinds(&a, &session.id).await;
    provider.release.notify_one();
    let b = engine(
        &dir,
        clock.clone(),
        config,
        provider.clone(),
        ToolRegistry::standard(),
        yes(),
    )
    .await;
    let report = b.recover().await.unwrap();
    assert_eq!(report.recovered.len(), 1);
    assert_eq!(report.recovered[0].phase, crate::phase::Phase::Unknown);
    assert_eq!(
        b.recover().await.unwrap().recovered.len(),
        0,
        "recovered twice"
    );
    // The stale owner added nothing after the jump; recovery completed its assistant.
    assert_eq!(kinds(&b, &session.id).await, before);
    assert_eq!(provider.count(), 1);
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r4_10_a_clock_jump_backward_does_not_delay_recovery_of_a_dead_owner() {
    use crate::clock::ManualClock;
    let dir = TestDir::new();
    let t0 = 1_700_000_000_000;
    {
        // An owner on this host that held a claim and died (its lock is free again).
        let clock = ManualClock::new(t0);
        let mut store = Store::open(&dir.database(), &clock).unwrap();
        let owner = store
            .write(|tx| {
                crate::owner::Owner::register(tx, &crate::owner::Owners::new(dir.owners()), t0)
            })
            .unwrap();
        let exe = interrupted(&mut store, "ses_1", Stage::Tools, t0);
        store
            .conn()
            .execute(
                "UPDATE session_execution SET owner_id = ?1 WHERE id = ?2",
                [&owner.id, &exe],
            )
            .unwrap();
        drop(owner);
    }
    let clock = ManualClock::shared(t0 - 3_600_000);
    let provider = FakeProvider::new(vec![Answer::text("continued")]);
    let engine = engine(
        &dir,
        clock,
        Config::default(),
        provider,
        ToolRegistry::standard(),
        yes(),
    )
    .await;
    let report = engine.recover().await.unwrap();
    assert_eq!(
        (report.recovered.len(), report.dead_owners.len()),
        (1, 1),
        "{report:?}"
    );
    engine.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i10_wakes_that_ring_a_running_execution_keep_their_scope() {
    use crate::events::{Delivery, Event};
    let dir = TestDir::new();
    let provider = FakeProvider::new(vec![
        Answer {
            text: vec!["first".into()],
            hold: true,
            ..Answer::default()
        },
        Answer::text("continued"),
    ]);
    let engine = default_engine(&dir, provider.clone()).await;
    let session = engine.create_session("t", &dir.work()).await.unwrap();
    engine
        .admit(&session.id, "go", Delivery::Queue)
        .await
        .unwrap();
    wait_until("the first step", async || provider.count() == 1).await;
    // Meanwhile: an unrelated `admit` input, and a recovery wake for this session.
    let note = engine
        .admit(&session.id, "a note", Delivery::Admit)
        .await
        .unwrap();
    let sid = session.id.clone();
    let now = SystemClock::new().now_ms();
    engine
        .db()
        .write(move |tx| {
            crate::store::events::append_unowned(tx, &sid, now, Event::InputAdmitted {
                content: Vec::new(),
                input_id: "inp_rec_exe_earlier".into(),
                prompt: crate::message::CONTINUATION_TEXT.into(),
                delivery: Delivery::Queue,
                wake_pending: false,
                continuation_of: Some("exe_earlier".into()),
            })?;
            tx.execute(
                "INSERT INTO session_recovery (execution_id, session_id, continuation_message_id, phase, time_created)
                 VALUES ('exe_earlier', ?1, 'inp_rec_exe_earlier', 'ready', ?2)",
                rusqlite::params![sid, now],
            )?;
            Ok(())
        })
        .await
        .unwrap();
    assert_eq!(
        engine.wake(
            &session.id,
            crate::store::sessions::Scope::continuation("inp_rec_exe_earlier")
        ),
        crate::coordinator::Wake::Rang
    );
    provider.release.notify_one();
    assert_eq!(
        engine.wait_idle(&session.id).await,
        Some(SessionOutcome::Ran(Outcome::Idle))
    );
    assert_eq!(
        pending(&engine, &session.id).await,
        vec![note.id],
        "the rerun promoted the note"
    );
    assert_eq!(
        kinds(&engine, &session.id).await,
        vec!["user", "assistant", "synthetic:continuation", "assistant"]
    );
    engine.shutdown().await.unwrap();
}

#[derive(Debug)]
struct PanickingProvider;

impl crate::provider::Provider for PanickingProvider {
    fn name(&self) -> &str {
        "panicking"
    }
    fn with_model(&self, _model: &str) -> Option<Arc<dyn crate::provider::Provider>> {
        None
    }
    fn model(&self) -> &str {
        "none"
    }
    fn stream(
        &self,
        _request: crate::provider::ProviderRequest,
    ) -> crate::provider::ProviderStream {
        panic!("a provider bug")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r4_9_a_panicking_execution_stops_renewing_and_frees_its_session() {
    use crate::events::Delivery;
    let dir = TestDir::new();
    let mut config = Config::default();
    config.lease.heartbeat_ms = Some(20);
    let engine = engine(
        &dir,
        SystemClock::shared(),
        config,
        Arc::new(PanickingProvider),
        ToolRegistry::standard(),
        yes(),
    )
    .await;
    let session = engine.create_session("t", &dir.work()).await.unwrap();
    engine
        .admit(&session.id, "go", Delivery::Queue)
        .await
        .unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(5), engine.wait_idle(&session.id))
        .await
        .expect("the session stayed busy after the panic");
    assert!(
        matches!(&outcome, Some(SessionOutcome::Ran(Outcome::Error(m))) if m.contains("a provider bug")),
        "{outcome:?}"
    );
    // The claim stays for recovery, and nobody renews it any more.
    let sid = session.id.clone();
    let expiry = || {
        let sid = sid.clone();
        let db = engine.db().clone();
        async move {
            db.read(move |c| Ok(crate::claim::for_session(c, &sid)?.and_then(|r| r.expires_at())))
                .await
                .unwrap()
        }
    };
    let first = expiry().await.expect("the claim is left for recovery");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(expiry().await, Some(first), "a heartbeat kept renewing");
    // The next prompt does not wait out the lease: nothing runs the session here,
    // so the abandoned claim is reconciled at once and the prompt admitted.
    engine.submit(&session.id, "again").await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), engine.wait_idle(&session.id))
        .await
        .expect("the session stayed busy");
    let recovered: i64 = engine
        .db()
        .read(|c| Ok(c.query_row("SELECT count(*) FROM session_recovery", [], |r| r.get(0))?))
        .await
        .unwrap();
    assert!(recovered >= 1, "the abandoned claim was not reconciled");
    engine.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r5_1_the_timer_recovers_this_owners_own_abandoned_claims_too() {
    let dir = TestDir::new();
    let provider = FakeProvider::new(vec![Answer::text("continued")]);
    let engine = default_engine(&dir, provider.clone()).await;
    // A claim of this very owner whose execution is gone (it failed), expiring soon.
    let exe = crashed_db(&dir, "ses_1", Stage::Tools, 30_000 - 300);
    let me = engine.owner_id().to_string();
    engine
        .db()
        .write(move |tx| {
            tx.execute(
                "UPDATE session_execution SET owner_id = ?1 WHERE id = ?2",
                [&me, &exe],
            )?;
            Ok(())
        })
        .await
        .unwrap();
    engine.start_background(crate::engine::Redriving::DueWakes);
    wait_until("the continuation", async || provider.count() == 1).await;
    engine.wait_idle("ses_1").await;
    engine.shutdown().await.unwrap();
}

mod wakes;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r4_3_a_prompt_for_a_session_that_does_not_exist_is_not_found_and_writes_nothing() {
    let dir = TestDir::new();
    let provider = FakeProvider::new(vec![Answer::text("answer")]);
    let engine = default_engine(&dir, provider.clone()).await;
    let refused = engine.submit("ses_nope", "hello").await.unwrap_err();
    assert!(
        matches!(
            refused,
            crate::Error::NotFound {
                kind: "session",
                ..
            }
        ),
        "{refused:?}"
    );
    let events: i64 = engine
        .db()
        .read(|c| Ok(c.query_row("SELECT count(*) FROM event", [], |r| r.get(0))?))
        .await
        .unwrap();
    assert_eq!(events, 0);
    assert_eq!(provider.count(), 0);
    engine.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r4_3_a_live_claim_of_a_provably_dead_owner_is_reconciled_at_once_not_reported_busy() {
    let dir = TestDir::new();
    let clock = SystemClock::new();
    {
        let mut store = Store::open(&dir.database(), &clock).unwrap();
        // Its lock file exists and nobody holds it: the process is gone, but the
        // lease (30 s from now) has not run out.
        std::fs::create_dir_all(dir.owners()).unwrap();
        std::fs::write(dir.owners().join("own_gone.lock"), b"").unwrap();
        store
            .conn()
            .execute(
                "INSERT INTO owner VALUES ('own_gone', 1, ?1, ?2, ?3, NULL, ?4)",
                rusqlite::params![
                    crate::owner::hostname(),
                    clock.now_ms(),
                    dir.owners().join("own_gone.lock").to_string_lossy(),
                    crate::host::boot_id()
                ],
            )
            .unwrap();
        interrupted(&mut store, "ses_1", Stage::Streaming, clock.now_ms());
    }
    let provider = FakeProvider::new(vec![Answer::text("answer")]);
    let engine = default_engine(&dir, provider.clone()).await;
    engine.submit("ses_1", "still there?").await.unwrap();
    assert_eq!(
        engine.wait_idle("ses_1").await,
        Some(SessionOutcome::Ran(Outcome::Idle))
    );
    assert_eq!(
        kinds(&engine, "ses_1").await,
        vec![
            "user",
            "assistant",
            "synthetic:continuation",
            "user",
            "assistant"
        ]
    );
    engine.shutdown().await.unwrap();
}

/// Caps the database at the pages it has: the next write that needs a page fails
/// as on a full disk.
async fn fill_disk(engine: &Engine) {
    engine
        .db()
        .with_conn(|conn| {
            let pages: i64 = conn.query_row("PRAGMA page_count", [], |r| r.get(0))?;
            conn.query_row(&format!("PRAGMA max_page_count = {pages}"), [], |r| {
                r.get::<_, i64>(0)
            })?;
            Ok(())
        })
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r4_14_a_first_prompt_refused_on_a_full_disk_leaves_no_session_behind_in_the_engine() {
    let dir = TestDir::new();
    let provider = FakeProvider::new(vec![Answer::text("hello")]);
    let engine = default_engine(&dir, provider.clone()).await;
    // A prompt long enough to need a new page wherever it goes.
    let prompt = "x".repeat(20_000);
    fill_disk(&engine).await;
    let error = engine
        .submit_new("a title", &dir.work(), &prompt)
        .await
        .unwrap_err();
    assert!(
        error.to_string().starts_with("the disk is full: "),
        "{error}"
    );
    let sessions: i64 = engine
        .db()
        .read(|c| Ok(c.query_row("SELECT count(*) FROM session", [], |r| r.get(0))?))
        .await
        .unwrap();
    assert_eq!(sessions, 0, "a refused prompt left a session behind");
    // With room, the same call creates the session and runs the prompt.
    engine
        .db()
        .with_conn(|conn| {
            conn.query_row("PRAGMA max_page_count = 1000000", [], |r| {
                r.get::<_, i64>(0)
            })?;
            Ok(())
        })
        .await
        .unwrap();
    let (session, input) = engine
        .submit_new("a title", &dir.work(), "hi")
        .await
        .unwrap();
    assert_eq!(
        (session.title.as_str(), input.prompt.as_str()),
        ("a title", "hi")
    );
    assert_eq!(
        engine.wait_idle(&session.id).await,
        Some(SessionOutcome::Ran(Outcome::Idle))
    );
    engine.shutdown().await.unwrap();
}

/// Caps the database at the pages it has, then fills the last page of the message
/// table (with rows of a session of its own): the next message written needs a page
/// it cannot have, as on a full disk.
async fn fill_message_pages(engine: &Engine) {
    engine
        .db()
        .with_conn(|conn| {
            let pages: i64 = conn.query_row("PRAGMA page_count", [], |r| r.get(0))?;
            conn.query_row(&format!("PRAGMA max_page_count = {pages}"), [], |r| {
                r.get::<_, i64>(0)
            })?;
            conn.execute(
                "INSERT INTO session (id, title, directory, time_created, time_updated) VALUES ('ses_pad', 'pad', '/', 0, 0)",
                [],
            )?;
            let mut n = 0;
            for size in [2_000, 500, 100, 20, 1] {
                loop {
                    n += 1;
                    let inserted = conn.execute(
                        "INSERT INTO session_message VALUES (?1, 'ses_pad', 'user', ?2, 0, 0, ?3)",
                        rusqlite::params![format!("msg_pad_{n:06}"), n, "x".repeat(size)],
                    );
                    if inserted.is_err() {
                        break;
                    }
                }
            }
            Ok(())
        })
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r5_7_a_full_disk_never_quarantines_a_recovery_wake_and_the_wake_runs_once_there_is_room() {
    let dir = TestDir::new();
    let exe = crashed_db(&dir, "ses_1", Stage::Tools, 60_000);
    let provider = FakeProvider::new(vec![Answer::text("carrying on")]);
    let engine = default_engine(&dir, provider.clone()).await;
    assert_eq!(engine.recover().await.unwrap().recovered.len(), 1);
    fill_message_pages(&engine).await;
    // More tries than the attempts that quarantine a wake.
    for _ in 0..(crate::recovery::WAKE_ATTEMPTS_MAX + 2) {
        engine.redrive_wakes().await.unwrap();
        let outcome = engine.wait_idle("ses_1").await;
        assert!(
            matches!(&outcome, Some(SessionOutcome::Ran(Outcome::Error(m)) | SessionOutcome::Error(m)) if m.starts_with("the disk is full")),
            "{outcome:?}"
        );
    }
    let id = exe.clone();
    let row = engine
        .db()
        .read(move |c| crate::inspect::recoveries_of(c, &id))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            row.recovery_error.as_deref(),
            row.wake_attempts,
            row.wake_pending
        ),
        (None, 0, true),
        "the disk's failure was counted against the wake"
    );
    assert_eq!(provider.count(), 0);
    engine
        .db()
        .with_conn(|conn| {
            conn.query_row("PRAGMA max_page_count = 1000000", [], |r| {
                r.get::<_, i64>(0)
            })?;
            conn.execute_batch(
                "DELETE FROM session_message WHERE session_id = 'ses_pad';
                 DELETE FROM session WHERE id = 'ses_pad';",
            )?;
            Ok(())
        })
        .await
        .unwrap();
    // The claims the failed tries left are recovery's; then the wake runs, once.
    engine.recover().await.unwrap();
    engine.redrive_wakes().await.unwrap();
    assert_eq!(
        engine.wait_idle("ses_1").await,
        Some(SessionOutcome::Ran(Outcome::Idle))
    );
    assert_eq!(provider.count(), 1);
    engine.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r4_14_an_input_that_cannot_be_read_quarantines_its_session_once_and_nothing_spins() {
    let dir = TestDir::new();
    let provider = FakeProvider::new(vec![Answer::text("answer")]);
    let engine = default_engine(&dir, provider.clone()).await;
    let session = engine.create_session("t", &dir.work()).await.unwrap();
    let input = engine
        .admit(&session.id, "hello", Delivery::Admit)
        .await
        .unwrap();
    // A damaged row: waiting for a wake, past what its CHECK constraint allows.
    let id = input.id.clone();
    engine
        .db()
        .with_conn(move |conn| {
            conn.execute_batch("PRAGMA ignore_check_constraints = ON")?;
            conn.execute(
                "UPDATE session_input SET delivery = 'bogus', wake_pending = 1 WHERE id = ?1",
                [&id],
            )?;
            conn.execute_batch("PRAGMA ignore_check_constraints = OFF")?;
            Ok(())
        })
        .await
        .unwrap();
    engine.redrive_wakes().await.unwrap();
    let outcome = engine.wait_idle(&session.id).await;
    assert!(
        matches!(&outcome, Some(SessionOutcome::Ran(Outcome::Error(m))) if m.contains("unknown delivery bogus") && m.contains("quarantined")),
        "{outcome:?}"
    );
    // The session's claim waits for the user with the reason; waking it again
    // starts nothing.
    let s = session.id.clone();
    let claim = engine
        .db()
        .read(move |c| {
            Ok(c.query_row(
                "SELECT recovery_error FROM session_execution WHERE session_id = ?1",
                [&s],
                |r| r.get::<_, Option<String>>(0),
            )?)
        })
        .await
        .unwrap();
    assert!(
        claim
            .as_deref()
            .is_some_and(|r| r.contains("unknown delivery bogus")),
        "{claim:?}"
    );
    engine.redrive_wakes().await.unwrap();
    assert!(matches!(
        engine.wait_idle(&session.id).await,
        Some(SessionOutcome::Quarantined { .. })
    ));
    assert_eq!(provider.count(), 0);
    engine.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r5_1_on_a_full_disk_the_background_retries_with_a_growing_pause_not_at_once() {
    let dir = TestDir::new();
    crashed_db(&dir, "ses_1", Stage::Tools, 60_000);
    let provider = FakeProvider::new(vec![Answer::text("carrying on")]);
    let engine = default_engine(&dir, provider.clone()).await;
    engine.recover().await.unwrap();
    fill_message_pages(&engine).await;
    let mut events = engine.subscribe();
    engine.start_background(crate::engine::Redriving::DueWakes);
    // What the loop tries in two seconds: each try starts the session once.
    let tries = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counting = {
        let tries = tries.clone();
        tokio::spawn(async move {
            while let Ok(event) = events.recv().await {
                if matches!(event, crate::runner::EngineEvent::Running { .. }) {
                    tries.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    counting.abort();
    let tries = tries.load(std::sync::atomic::Ordering::SeqCst);
    // A pause of 250 ms that doubles allows a handful; retrying at once would be
    // hundreds.
    assert!((1..=6).contains(&tries), "{tries} tries in two seconds");
    assert_eq!(provider.count(), 0);
    engine.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_of_whitespace_alone_is_refused_and_nothing_is_admitted() {
    let dir = TestDir::new();
    let provider = FakeProvider::new(vec![Answer::text("hello")]);
    let engine = default_engine(&dir, provider.clone()).await;
    let count = |table: &'static str| {
        let db = engine.db().clone();
        async move {
            db.read(move |c| {
                Ok(
                    c.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| {
                        r.get::<_, i64>(0)
                    })?,
                )
            })
            .await
            .unwrap()
        }
    };
    let blank = " \n\t ";
    let error = engine
        .submit_new("a title", &dir.work(), blank)
        .await
        .unwrap_err();
    assert_eq!(error.to_string(), "the prompt is empty");
    assert_eq!(count("session").await, 0, "a refused prompt left a session");
    let session = engine.create_session("t", &dir.work()).await.unwrap();
    let error = engine.submit(&session.id, blank).await.unwrap_err();
    assert_eq!(error.to_string(), "the prompt is empty");
    let error = engine
        .admit(&session.id, "", Delivery::Queue)
        .await
        .unwrap_err();
    assert_eq!(error.to_string(), "the prompt is empty");
    assert_eq!(count("session_input").await, 0);
    assert_eq!(provider.count(), 0, "the provider was asked");
    engine.shutdown().await.unwrap();
}
