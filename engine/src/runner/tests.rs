//! The runner end to end, in process, with fakes that count what they are asked.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::json;
use tokio::sync::Notify;

use crate::claim::{self, ClaimState};
use crate::clock::{Clock, ManualClock, SharedClock, SystemClock};
use crate::config::Config;
use crate::coordinator::SessionOutcome;
use crate::events::{Delivery, Event};
use crate::message::{Finish, MAX_RESOURCE_BYTES, MessageData, Part, PromptBlock, ToolStatus};
use crate::provider::scripted::{Script, ScriptedProvider};
use crate::provider::{ChatMessage, ProviderError};
use crate::runner::Outcome;
use crate::store::{events, rows};
use crate::testing::{
    Answer, FakeProvider, FakeTool, GatePermission, TestDir, committed, default_engine, engine,
};
use crate::tools::{Headless, ToolRegistry};
use crate::{Engine, doctor};

fn yes() -> Arc<Headless> {
    Arc::new(Headless { allow_all: true })
}

fn tools_with(fakes: &[&Arc<FakeTool>]) -> ToolRegistry {
    let mut tools = ToolRegistry::standard();
    for fake in fakes {
        tools.add((*fake).clone());
    }
    tools
}

async fn messages(engine: &Engine, session: &str) -> Vec<crate::projection::MessageRow> {
    let session = session.to_string();
    engine
        .db()
        .read(move |c| rows::messages(c, &session))
        .await
        .unwrap()
}

async fn event_kinds(engine: &Engine, session: &str) -> Vec<&'static str> {
    let session = session.to_string();
    engine
        .db()
        .read(move |c| events::load(c, &session))
        .await
        .unwrap()
        .iter()
        .map(|r| r.event.kind())
        .collect()
}

async fn claim_of(engine: &Engine, session: &str) -> Option<claim::ClaimRow> {
    let session = session.to_string();
    engine
        .db()
        .read(move |c| claim::for_session(c, &session))
        .await
        .unwrap()
}

async fn doctor_ok(engine: &Engine) {
    let report = engine
        .db()
        .read(|c| doctor::check(c, i64::MAX / 2))
        .await
        .unwrap();
    assert!(report.ok, "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r4_a_prompt_runs_through_a_tool_call_to_idle() {
    let dir = TestDir::new();
    std::fs::write(format!("{}/notes.txt", dir.work()), "x").unwrap();
    let script = Script::parse(
        r#"
        [[step]]
        text = ["Let me ", "look."]
        tool_calls = [{ tool = "list_dir", input = { path = "." } }]
        [[step]]
        text = ["Found notes.txt."]
        "#,
    )
    .unwrap();
    let provider = Arc::new(ScriptedProvider::new(script, "demo".into()));
    let clock = SystemClock::shared();
    let engine = engine(
        &dir,
        clock,
        Config::default(),
        provider,
        ToolRegistry::standard(),
        yes(),
    )
    .await;
    let session = engine.create_session("t", &dir.work()).await.unwrap();
    engine
        .admit(&session.id, "what is here?", Delivery::Queue)
        .await
        .unwrap();
    assert_eq!(
        engine.wait_idle(&session.id).await,
        Some(SessionOutcome::Ran(Outcome::Idle))
    );
    assert_eq!(claim_of(&engine, &session.id).await, None);
    let kinds = event_kinds(&engine, &session.id).await;
    assert_eq!(
        kinds,
        vec![
            "session.created",
            "input.admitted",
            "input.promoted",
            "step.started",
            "step.text",
            "step.ended",
            "tool.called",
            "tool.started",
            "tool.completed",
            "step.started",
            "step.text",
            "step.ended",
        ]
    );
    let transcript = messages(&engine, &session.id).await;
    assert_eq!(transcript.len(), 3);
    let first = transcript[1].data.as_assistant().unwrap();
    assert_eq!(first.text_parts(), vec!["Let me look."]);
    assert_eq!(first.finish, Some(Finish::ToolCalls));
    let tool = first.tools().next().unwrap();
    assert_eq!(
        (tool.state.status, tool.state.output.as_deref()),
        (ToolStatus::Completed, Some("notes.txt"))
    );
    let second = transcript[2].data.as_assistant().unwrap();
    assert_eq!(
        (second.text_parts(), second.finish),
        (vec!["Found notes.txt."], Some(Finish::Stop))
    );
    doctor_ok(&engine).await;
    engine.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r4_streamed_text_is_committed_in_coalesced_chunks() {
    let dir = TestDir::new();
    let chunks: Vec<String> = (0..400).map(|i| format!("w{i} ")).collect();
    let provider = FakeProvider::new(vec![Answer {
        text: chunks.clone(),
        delay: Duration::from_millis(1),
        ..Answer::default()
    }]);
    let engine = default_engine(&dir, provider).await;
    let session = engine.create_session("t", &dir.work()).await.unwrap();
    engine
        .admit(&session.id, "talk", Delivery::Queue)
        .await
        .unwrap();
    engine.wait_idle(&session.id).await;
    let texts = event_kinds(&engine, &session.id)
        .await
        .iter()
        .filter(|k| **k == "step.text")
        .count();
    // 400 deltas over at least 400 ms: at most one commit per ~100 ms, plus the last.
    assert!(
        (2..=400 / 20).contains(&texts),
        "{texts} text commits for 400 deltas"
    );
    let transcript = messages(&engine, &session.id).await;
    assert_eq!(transcript[1].data.text(), chunks.concat());
    let stats = engine.runner_stats();
    assert_eq!(stats.deltas, 400);
    assert_eq!(stats.text_commits as usize, texts);
    engine.shutdown().await.unwrap();
}

/// protocol §6 invariant 8, paused mid-stream: the stale owner's claim expires and is
/// taken over; when it resumes it commits nothing and calls nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i8_a_stale_owner_resumed_mid_stream_makes_no_call_and_commits_nothing() {
    let dir = TestDir::new();
    let clock = ManualClock::shared(1_700_000_000_000);
    let mut config = Config::default();
    config.lease.heartbeat_ms = Some(3_600_000); // the paused process does not beat
    let provider = FakeProvider::new(vec![Answer {
        text: vec!["Working".into()],
        calls: vec![("run_command".into(), json!({"command": "true"}))],
        hold: true,
        ..Answer::default()
    }]);
    let fake = FakeTool::new("run_command");
    let engine = engine(
        &dir,
        clock.clone(),
        config,
        provider.clone(),
        tools_with(&[&fake]),
        yes(),
    )
    .await;
    let session = engine.create_session("t", &dir.work()).await.unwrap();
    let mut events = engine.subscribe();
    engine
        .admit(&session.id, "go", Delivery::Queue)
        .await
        .unwrap();
    committed(&mut events, "step.text").await;

    // Paused past its lease; another owner takes the claim over.
    clock.advance(Duration::from_secs(31));
    let now = clock.now_ms();
    let sid = session.id.clone();
    let taken = engine
        .db()
        .write(move |tx| {
            let row = claim::for_session(tx, &sid)?.unwrap();
            claim::takeover(tx, &row, "own_other", now, 30_000, 5_000)
        })
        .await
        .unwrap();
    assert!(taken.is_some());
    let before = event_kinds(&engine, &session.id).await.len();

    provider.release.notify_one();
    assert_eq!(
        engine.wait_idle(&session.id).await,
        Some(SessionOutcome::Ran(Outcome::Lost))
    );
    assert_eq!(provider.count(), 1, "a provider call after the takeover");
    assert_eq!(
        fake.prepares.load(Ordering::SeqCst),
        0,
        "a tool call after the takeover"
    );
    assert_eq!(
        event_kinds(&engine, &session.id).await.len(),
        before,
        "an event after the takeover"
    );
    engine.shutdown().await.unwrap();
}

/// protocol §6 invariant 8, paused at a permission prompt right before a tool dispatch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i8_a_stale_owner_resumed_before_a_tool_dispatch_dispatches_nothing() {
    let dir = TestDir::new();
    let clock = ManualClock::shared(1_700_000_000_000);
    let mut config = Config::default();
    config.lease.heartbeat_ms = Some(3_600_000);
    let provider = FakeProvider::new(vec![Answer::call(
        "run_command",
        json!({"command": "true"}),
    )]);
    let fake = FakeTool::new("run_command");
    let permission = Arc::new(GatePermission {
        release: Arc::new(Notify::new()),
        asked: AtomicUsize::new(0),
        allow: true,
    });
    let engine = engine(
        &dir,
        clock.clone(),
        config,
        provider.clone(),
        tools_with(&[&fake]),
        permission.clone(),
    )
    .await;
    let session = engine.create_session("t", &dir.work()).await.unwrap();
    let mut events = engine.subscribe();
    engine
        .admit(&session.id, "go", Delivery::Queue)
        .await
        .unwrap();
    committed(&mut events, "tool.called").await;
    tokio::time::timeout(Duration::from_secs(5), async {
        while permission.asked.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap();

    clock.advance(Duration::from_secs(31));
    let now = clock.now_ms();
    let sid = session.id.clone();
    engine
        .db()
        .write(move |tx| {
            let row = claim::for_session(tx, &sid)?.unwrap();
            claim::takeover(tx, &row, "own_other", now, 30_000, 5_000)
        })
        .await
        .unwrap()
        .unwrap();
    let before = event_kinds(&engine, &session.id).await.len();
    permission.release.notify_one();
    assert_eq!(
        engine.wait_idle(&session.id).await,
        Some(SessionOutcome::Ran(Outcome::Lost))
    );
    assert_eq!(fake.prepares.load(Ordering::SeqCst), 0);
    assert_eq!(provider.count(), 1);
    assert_eq!(event_kinds(&engine, &session.id).await.len(), before);
    engine.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i9_each_provider_and_tool_call_happens_once_and_the_prompt_is_sent_once() {
    let dir = TestDir::new();
    let fake = FakeTool::new("probe");
    let provider = FakeProvider::new(vec![
        Answer::call("probe", json!({})),
        Answer::call("probe", json!({})),
        Answer::text("done"),
    ]);
    let engine = engine(
        &dir,
        SystemClock::shared(),
        Config::default(),
        provider.clone(),
        tools_with(&[&fake]),
        yes(),
    )
    .await;
    let session = engine.create_session("t", &dir.work()).await.unwrap();
    engine
        .admit(&session.id, "the one prompt", Delivery::Queue)
        .await
        .unwrap();
    engine.wait_idle(&session.id).await;
    assert_eq!(provider.count(), 3);
    assert_eq!(fake.runs.load(Ordering::SeqCst), 2);
    let requests = provider.requests.lock().unwrap().clone();
    let indexes: Vec<usize> = requests.iter().map(|r| r.step_index).collect();
    assert_eq!(indexes, vec![0, 1, 2]);
    for request in &requests {
        let prompts = request
            .messages
            .iter()
            .filter(|m| matches!(m, ChatMessage::User(t) if t == "the one prompt"))
            .count();
        assert_eq!(prompts, 1);
    }
    // The last request carries both tool results, each once.
    let results = requests[2]
        .messages
        .iter()
        .filter(|m| matches!(m, ChatMessage::ToolResult { content, .. } if content == "probe ran"))
        .count();
    assert_eq!(results, 2);
    engine.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i16_every_admitted_input_is_promoted_once_in_admitted_order() {
    let dir = TestDir::new();
    let provider = FakeProvider::new(vec![Answer {
        text: vec!["slow ".into(), "answer".into()],
        delay: Duration::from_millis(150),
        ..Answer::default()
    }]);
    let engine = default_engine(&dir, provider.clone()).await;
    let session = engine.create_session("t", &dir.work()).await.unwrap();
    let mut events = engine.subscribe();
    engine
        .admit(&session.id, "first", Delivery::Queue)
        .await
        .unwrap();
    committed(&mut events, "step.started").await;
    for prompt in ["second", "third"] {
        engine
            .admit(&session.id, prompt, Delivery::Queue)
            .await
            .unwrap();
    }
    engine
        .admit(&session.id, "a note that rides along", Delivery::Admit)
        .await
        .unwrap();
    engine
        .admit(&session.id, "fourth", Delivery::Queue)
        .await
        .unwrap();
    assert_eq!(
        engine.wait_idle(&session.id).await,
        Some(SessionOutcome::Ran(Outcome::Idle))
    );
    let users: Vec<String> = messages(&engine, &session.id)
        .await
        .iter()
        .filter_map(|m| match &m.data {
            MessageData::User(u) => Some(u.text.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        users,
        vec![
            "first",
            "second",
            "third",
            "a note that rides along",
            "fourth"
        ]
    );
    let sid = session.id.clone();
    let pending = engine
        .db()
        .read(move |c| rows::pending_inputs(c, &sid))
        .await
        .unwrap();
    assert!(pending.is_empty(), "{pending:?}");

    // An `admit` input alone is stored, not run.
    engine
        .admit(&session.id, "later", Delivery::Admit)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let sid = session.id.clone();
    let pending = engine
        .db()
        .read(move |c| rows::pending_inputs(c, &sid))
        .await
        .unwrap();
    assert_eq!(pending.len(), 1);
    assert!(!engine.coordinator().is_running(&session.id));
    doctor_ok(&engine).await;
    engine.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r3_4_cancelling_a_running_command_stops_its_group_and_leaves_no_open_tool() {
    let dir = TestDir::new();
    let work = dir.work();
    let provider = FakeProvider::new(vec![Answer::call(
        "run_command",
        json!({"command": "sleep 300 & echo $! > child.pid; sleep 300"}),
    )]);
    let engine = default_engine(&dir, provider).await;
    let session = engine.create_session("t", &work).await.unwrap();
    let mut events = engine.subscribe();
    engine
        .admit(&session.id, "sleep", Delivery::Queue)
        .await
        .unwrap();
    let record = committed(&mut events, "tool.started").await;
    let Event::ToolStarted {
        process: Some(process),
        ..
    } = record.event
    else {
        panic!("no process identity recorded")
    };
    let pid_file = std::path::Path::new(&work).join("child.pid");
    tokio::time::timeout(Duration::from_secs(5), async {
        while !pid_file.exists() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap();
    assert!(engine.cancel(&session.id));
    assert_eq!(
        engine.wait_idle(&session.id).await,
        Some(SessionOutcome::Ran(Outcome::Cancelled))
    );
    // The whole group is gone before the cancellation committed.
    let child: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    for pid in [process.pid, child] {
        assert!(!is_alive(pid), "process {pid} survived the cancellation");
    }
    assert_eq!(claim_of(&engine, &session.id).await, None);
    let transcript = messages(&engine, &session.id).await;
    let assistant = transcript[1].data.as_assistant().unwrap();
    assert_eq!(assistant.finish, Some(Finish::Error));
    assert_eq!(
        assistant.error.as_ref().unwrap().message,
        "Session execution interrupted"
    );
    for tool in assistant.tools() {
        assert_eq!(
            (tool.state.status, tool.state.error.as_deref()),
            (ToolStatus::Error, Some("Tool execution interrupted"))
        );
    }
    doctor_ok(&engine).await;
    engine.shutdown().await.unwrap();
}

fn is_alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s[s.rfind(')').unwrap() + 1..].trim_start().starts_with('Z'))
        .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r4_8_a_cancelled_stream_keeps_its_text_and_a_wake_meanwhile_runs_after() {
    let dir = TestDir::new();
    let provider = FakeProvider::new(vec![
        Answer {
            text: vec!["partial ".into(), "answer".into()],
            hold: true,
            ..Answer::default()
        },
        Answer::text("fresh"),
    ]);
    let engine = default_engine(&dir, provider.clone()).await;
    let session = engine.create_session("t", &dir.work()).await.unwrap();
    let mut events = engine.subscribe();
    engine
        .admit(&session.id, "go", Delivery::Queue)
        .await
        .unwrap();
    committed(&mut events, "step.text").await;
    engine.cancel(&session.id);
    engine
        .admit(&session.id, "next", Delivery::Queue)
        .await
        .unwrap();
    let interrupted = committed(&mut events, "step.interrupted").await;
    assert_eq!(
        engine.wait_idle(&session.id).await,
        Some(SessionOutcome::Ran(Outcome::Idle))
    );
    let sid = session.id.clone();
    let log = engine
        .db()
        .read(move |c| events::load(c, &sid))
        .await
        .unwrap();
    // The fresh execution started only after the cancellation committed.
    let fresh = log
        .iter()
        .find(|r| r.seq > interrupted.seq && r.event.kind() == "step.started")
        .unwrap();
    assert_ne!(
        fresh.origin.as_ref().unwrap().execution_id,
        interrupted.origin.as_ref().unwrap().execution_id
    );
    let transcript = messages(&engine, &session.id).await;
    let texts: Vec<String> = transcript.iter().map(|m| m.data.text()).collect();
    assert_eq!(texts, vec!["go", "partial answer", "next", "fresh"]);
    engine.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_failures_are_retried_when_retryable_and_recorded_when_not() {
    let dir = TestDir::new();
    let mut config = Config::default();
    config.provider.max_attempts = 3;
    let provider = FakeProvider::new(vec![
        Answer {
            error: Some(ProviderError::retryable("HTTP 503")),
            ..Answer::default()
        },
        Answer::text("recovered"),
        Answer {
            text: vec!["half".into()],
            error: Some(ProviderError::fatal("HTTP 400: bad")),
            ..Answer::default()
        },
    ]);
    let engine = engine(
        &dir,
        SystemClock::shared(),
        config,
        provider.clone(),
        ToolRegistry::standard(),
        yes(),
    )
    .await;
    let session = engine.create_session("t", &dir.work()).await.unwrap();
    engine
        .admit(&session.id, "one", Delivery::Queue)
        .await
        .unwrap();
    assert_eq!(
        engine.wait_idle(&session.id).await,
        Some(SessionOutcome::Ran(Outcome::Idle))
    );
    assert_eq!(provider.count(), 2);
    engine
        .admit(&session.id, "two", Delivery::Queue)
        .await
        .unwrap();
    assert_eq!(
        engine.wait_idle(&session.id).await,
        Some(SessionOutcome::Ran(Outcome::Failed("HTTP 400: bad".into())))
    );
    let transcript = messages(&engine, &session.id).await;
    let failed = transcript.last().unwrap().data.as_assistant().unwrap();
    assert_eq!(failed.finish, Some(Finish::Error));
    assert_eq!(failed.error.as_ref().unwrap().message, "HTTP 400: bad");
    assert_eq!(failed.text_parts(), vec!["half"]);
    assert_eq!(claim_of(&engine, &session.id).await, None);
    doctor_ok(&engine).await;
    engine.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headless_runs_deny_tools_outside_the_allow_list() {
    let dir = TestDir::new();
    let provider = FakeProvider::new(vec![
        Answer::call("write_file", json!({"path": "x.txt", "content": "no"})),
        Answer::text("ok"),
    ]);
    let engine = engine(
        &dir,
        SystemClock::shared(),
        Config::default(),
        provider,
        ToolRegistry::standard(),
        Arc::new(Headless { allow_all: false }),
    )
    .await;
    let work = dir.work();
    let session = engine.create_session("t", &work).await.unwrap();
    engine
        .admit(&session.id, "write", Delivery::Queue)
        .await
        .unwrap();
    engine.wait_idle(&session.id).await;
    let transcript = messages(&engine, &session.id).await;
    let tool = transcript[1]
        .data
        .as_assistant()
        .unwrap()
        .tools()
        .next()
        .unwrap()
        .clone();
    assert_eq!(tool.state.status, ToolStatus::Error);
    assert!(tool.state.error.unwrap().contains("pass --yes"));
    assert!(!std::path::Path::new(&work).join("x.txt").exists());
    engine.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_stops_at_the_step_limit() {
    let dir = TestDir::new();
    let fake = FakeTool::new("probe");
    let mut config = Config::default();
    config.agent.max_steps = 3;
    let provider = FakeProvider::new(vec![Answer::call("probe", json!({}))]);
    let engine = engine(
        &dir,
        SystemClock::shared(),
        config,
        provider.clone(),
        tools_with(&[&fake]),
        yes(),
    )
    .await;
    let session = engine.create_session("t", &dir.work()).await.unwrap();
    engine
        .admit(&session.id, "loop", Delivery::Queue)
        .await
        .unwrap();
    assert_eq!(
        engine.wait_idle(&session.id).await,
        Some(SessionOutcome::Ran(Outcome::Failed(
            "stopped after 3 steps".into()
        )))
    );
    assert_eq!((provider.count(), fake.runs.load(Ordering::SeqCst)), (3, 3));
    assert_eq!(claim_of(&engine, &session.id).await, None);
    engine.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i13_compaction_summarises_and_the_agent_carries_on() {
    let dir = TestDir::new();
    let mut config = Config::default();
    config.compaction.token_budget = 110;
    let provider = Arc::new(ScriptedProvider::new(
        Script::parse("[[step]]\ntext = [\"A long answer that fills the context window quickly. \", \"More words, and more words, and more.\"]\n").unwrap(),
        "demo".into(),
    ));
    let engine = engine(
        &dir,
        SystemClock::shared(),
        config,
        provider,
        ToolRegistry::standard(),
        yes(),
    )
    .await;
    let session = engine.create_session("t", &dir.work()).await.unwrap();
    for prompt in [
        "first question, quite long to use up tokens",
        "second question",
        "third question",
    ] {
        engine
            .admit(&session.id, prompt, Delivery::Queue)
            .await
            .unwrap();
        assert_eq!(
            engine.wait_idle(&session.id).await,
            Some(SessionOutcome::Ran(Outcome::Idle))
        );
    }
    let transcript = messages(&engine, &session.id).await;
    let summaries: Vec<&MessageData> = transcript
        .iter()
        .map(|m| &m.data)
        .filter(|d| matches!(d, MessageData::Synthetic(s) if s.kind == crate::message::SyntheticKind::Compaction))
        .collect();
    assert!(!summaries.is_empty(), "no compaction happened");
    assert!(summaries[0].text().contains("first question"));
    // The last prompt still got its answer after the compaction.
    let last = transcript.last().unwrap().data.as_assistant().unwrap();
    assert_eq!(last.finish, Some(Finish::Stop));
    let kinds = event_kinds(&engine, &session.id).await;
    let started = kinds.iter().filter(|k| **k == "compaction.started").count();
    let ended = kinds.iter().filter(|k| **k == "compaction.ended").count();
    assert_eq!(started, ended);
    assert_eq!(claim_of(&engine, &session.id).await, None);
    doctor_ok(&engine).await;
    engine.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r4_different_sessions_run_concurrently_and_wakes_coalesce() {
    let dir = TestDir::new();
    let provider = FakeProvider::new(vec![Answer {
        text: vec!["x".into()],
        hold: true,
        ..Answer::default()
    }]);
    let clock: SharedClock = SystemClock::shared();
    let engine = engine(
        &dir,
        clock.clone(),
        Config::default(),
        provider.clone(),
        ToolRegistry::standard(),
        yes(),
    )
    .await;
    let a = engine.create_session("a", &dir.work()).await.unwrap();
    let b = engine.create_session("b", &dir.work()).await.unwrap();
    engine.admit(&a.id, "a", Delivery::Queue).await.unwrap();
    engine.admit(&b.id, "b", Delivery::Queue).await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), async {
        while provider.count() < 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("both sessions should be in a step at once");
    for s in [&a.id, &b.id] {
        let claim = claim_of(&engine, s).await.unwrap();
        assert_eq!(claim.state(clock.now_ms()), ClaimState::Live);
    }
    // Many wakes while running coalesce into at most one re-run.
    for _ in 0..5 {
        engine.wake(&a.id, crate::store::sessions::Scope::Queued);
    }
    provider.release.notify_waiters();
    tokio::time::sleep(Duration::from_millis(50)).await;
    provider.release.notify_waiters();
    engine.wait_idle(&a.id).await;
    engine.wait_idle(&b.id).await;
    assert_eq!(
        provider.count(),
        2,
        "a coalesced wake with nothing to do must not call the provider"
    );
    engine.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_steps_retry_a_rate_limit_and_cancel_a_slow_stream() {
    use crate::provider::openai::OpenAiProvider;
    use crate::provider::openai::tests::{Reply, config, serve};
    let slow = Reply {
        status: 200,
        headers: vec![("Content-Type".into(), "text/event-stream".into())],
        pieces: (0..200)
            .map(|i| format!("data: {{\"choices\":[{{\"delta\":{{\"content\":\"{i} \"}}}}]}}\n\n"))
            .collect(),
        pause: Duration::from_millis(20),
    };
    let (url, seen) = serve(vec![
        Reply::status(429, "slow down"),
        Reply::sse(&[
            r#"{"choices":[{"delta":{"content":"hello"},"finish_reason":"stop"}]}"#,
            "[DONE]",
        ]),
        slow,
    ])
    .await;
    let dir = TestDir::new();
    let provider = Arc::new(OpenAiProvider::new(&config(&url)).unwrap());
    let engine = default_engine(&dir, provider).await;
    let session = engine.create_session("t", &dir.work()).await.unwrap();
    engine
        .admit(&session.id, "hi", Delivery::Queue)
        .await
        .unwrap();
    assert_eq!(
        engine.wait_idle(&session.id).await,
        Some(SessionOutcome::Ran(Outcome::Idle))
    );
    assert_eq!(
        seen.lock().unwrap().requests.len(),
        2,
        "one retry after the 429"
    );
    assert_eq!(messages(&engine, &session.id).await[1].data.text(), "hello");

    let mut events = engine.subscribe();
    engine
        .admit(&session.id, "talk slowly", Delivery::Queue)
        .await
        .unwrap();
    committed(&mut events, "step.text").await;
    let asked = std::time::Instant::now();
    engine.cancel(&session.id);
    assert_eq!(
        engine.wait_idle(&session.id).await,
        Some(SessionOutcome::Ran(Outcome::Cancelled))
    );
    assert!(
        asked.elapsed() < Duration::from_secs(2),
        "cancellation took {:?}",
        asked.elapsed()
    );
    tokio::time::timeout(Duration::from_secs(5), async {
        while seen.lock().unwrap().hangups == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the provider request was not dropped");
    engine.shutdown().await.unwrap();
}

#[test]
fn r4_8_tool_interrupted_strings_are_the_documented_ones() {
    let part = Part::Text {
        id: "p".into(),
        text: crate::message::TOOL_INTERRUPTED.into(),
    };
    assert_eq!(
        part,
        Part::Text {
            id: "p".into(),
            text: "Tool execution interrupted".into()
        }
    );
}

fn with_hanging_tool() -> ToolRegistry {
    let mut tools = ToolRegistry::standard();
    tools.add(Arc::new(crate::testing::HangingTool));
    tools
}

async fn hanging_engine(dir: &TestDir, config: crate::config::Config) -> Engine {
    let provider = FakeProvider::new(vec![
        Answer::call("hang", json!({})),
        Answer::text("after the hang"),
    ]);
    engine(
        dir,
        crate::clock::SystemClock::shared(),
        config,
        provider,
        with_hanging_tool(),
        yes(),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r4_13_a_tool_that_never_ends_is_still_cancelled() {
    let dir = TestDir::new();
    let mut config = crate::config::Config::default();
    config.tools.kill_grace_ms = 100;
    let engine = hanging_engine(&dir, config).await;
    let session = engine.create_session("t", &dir.work()).await.unwrap();
    let mut events = engine.subscribe();
    engine.submit(&session.id, "hang").await.unwrap();
    committed(&mut events, "tool.started").await;
    let started = std::time::Instant::now();
    assert!(engine.cancel(&session.id));
    assert_eq!(
        engine.wait_idle(&session.id).await,
        Some(SessionOutcome::Ran(Outcome::Cancelled))
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(claim_of(&engine, &session.id).await, None);
    assert!(
        event_kinds(&engine, &session.id)
            .await
            .contains(&"step.interrupted")
    );
    let transcript = messages(&engine, &session.id).await;
    let tool = transcript[1]
        .data
        .as_assistant()
        .unwrap()
        .tools()
        .next()
        .unwrap()
        .clone();
    assert_eq!(
        (tool.state.status, tool.state.error.as_deref()),
        (ToolStatus::Error, Some("Tool execution interrupted"))
    );
    doctor_ok(&engine).await;
    engine.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r4_13_a_tool_that_never_ends_times_out_and_the_turn_goes_on() {
    let dir = TestDir::new();
    let mut config = crate::config::Config::default();
    config.tools.command_timeout_ms = 200;
    let engine = hanging_engine(&dir, config).await;
    let session = engine.create_session("t", &dir.work()).await.unwrap();
    engine.submit(&session.id, "hang").await.unwrap();
    assert_eq!(
        engine.wait_idle(&session.id).await,
        Some(SessionOutcome::Ran(Outcome::Idle))
    );
    let transcript = messages(&engine, &session.id).await;
    let tool = transcript[1]
        .data
        .as_assistant()
        .unwrap()
        .tools()
        .next()
        .unwrap()
        .clone();
    assert_eq!(tool.state.status, ToolStatus::Error);
    assert_eq!(
        tool.state.error.as_deref(),
        Some("`hang` did not finish within 200 ms and was abandoned")
    );
    assert_eq!(transcript[2].data.text(), "after the hang");
    engine.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r4_13_a_tool_that_never_ends_stops_when_the_claim_is_lost() {
    let dir = TestDir::new();
    let mut config = crate::config::Config::default();
    config.lease.heartbeat_ms = Some(20);
    config.tools.kill_grace_ms = 100;
    let engine = hanging_engine(&dir, config).await;
    let session = engine.create_session("t", &dir.work()).await.unwrap();
    let mut events = engine.subscribe();
    engine.submit(&session.id, "hang").await.unwrap();
    committed(&mut events, "tool.started").await;
    // Another owner takes the session over (as recovery would).
    let id = session.id.clone();
    engine
        .db()
        .with_conn(move |c| {
            c.execute(
                "UPDATE session_execution SET owner_id = 'own_thief', epoch = epoch + 1
                 WHERE session_id = ?1",
                [id],
            )?;
            Ok(())
        })
        .await
        .unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(3), engine.wait_idle(&session.id))
        .await
        .expect("the execution kept waiting for the tool");
    assert_eq!(outcome, Some(SessionOutcome::Ran(Outcome::Lost)));
    assert!(
        !event_kinds(&engine, &session.id)
            .await
            .contains(&"step.interrupted")
    );
    engine.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_answer_is_committed_in_chunks_that_grow_with_it() {
    let dir = TestDir::new();
    // 2 MiB streamed at once, in 1 KiB deltas.
    let chunk = "x".repeat(1024);
    let provider = FakeProvider::new(vec![Answer {
        text: vec![chunk; 2048],
        ..Answer::default()
    }]);
    let engine = default_engine(&dir, provider).await;
    let session = engine.create_session("t", &dir.work()).await.unwrap();
    engine.submit(&session.id, "write a lot").await.unwrap();
    engine.wait_idle(&session.id).await;
    let stats = engine.runner_stats();
    // Fixed 4 KiB chunks would take 512 commits, each rewriting the whole answer.
    assert!(stats.text_commits < 80, "{} commits", stats.text_commits);
    let transcript = messages(&engine, &session.id).await;
    assert_eq!(transcript[1].data.text().len(), 2 * 1024 * 1024);
    engine.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r4_18_a_retry_waits_as_long_as_the_provider_asked_and_says_so() {
    let dir = TestDir::new();
    let mut config = Config::default();
    config.provider.max_attempts = 3;
    let mut limited = ProviderError::retryable("rate-limited: slow down")
        .of_kind(crate::provider::ErrorKind::RateLimited);
    limited.retry_after = Some(Duration::from_millis(400));
    let mut far = ProviderError::retryable("rate-limited: come back tomorrow")
        .of_kind(crate::provider::ErrorKind::RateLimited);
    far.retry_after = Some(Duration::from_secs(86_400));
    let provider = FakeProvider::new(vec![
        Answer {
            error: Some(limited),
            ..Answer::default()
        },
        Answer::text("after the wait"),
        Answer {
            error: Some(far),
            ..Answer::default()
        },
    ]);
    let engine = engine(
        &dir,
        SystemClock::shared(),
        config,
        provider.clone(),
        ToolRegistry::standard(),
        yes(),
    )
    .await;
    let mut events = engine.subscribe();
    let session = engine.create_session("t", &dir.work()).await.unwrap();
    let started = std::time::Instant::now();
    engine
        .admit(&session.id, "one", Delivery::Queue)
        .await
        .unwrap();
    assert_eq!(
        engine.wait_idle(&session.id).await,
        Some(SessionOutcome::Ran(Outcome::Idle))
    );
    assert!(
        started.elapsed() >= Duration::from_millis(400),
        "it did not wait as asked: {:?}",
        started.elapsed()
    );
    let retrying = loop {
        match events.recv().await.unwrap() {
            crate::runner::EngineEvent::Retrying {
                attempt, of, error, ..
            } => break (attempt, of, error),
            _ => continue,
        }
    };
    assert_eq!(retrying, (2, 3, "rate-limited: slow down".to_string()));
    // A wait longer than Steward's is no retry: the step fails, saying so.
    engine
        .admit(&session.id, "two", Delivery::Queue)
        .await
        .unwrap();
    let outcome = engine.wait_idle(&session.id).await;
    assert_eq!(provider.count(), 3, "no retry of a day-long wait");
    let Some(SessionOutcome::Ran(Outcome::Failed(message))) = outcome else {
        panic!("{outcome:?}");
    };
    assert!(message.contains("longer than Steward waits"), "{message}");
    let transcript = messages(&engine, &session.id).await;
    let failed = transcript.last().unwrap().data.as_assistant().unwrap();
    assert_eq!(
        failed.error.as_ref().unwrap().reason.as_deref(),
        Some("rate_limited")
    );
    engine.shutdown().await.unwrap();
}

/// Answers steps with two tool calls and then text, a turn at a time, and fails
/// every compaction (as the Messages API did when tools were left out).
#[derive(Debug, Default)]
struct NoSummaries {
    steps: AtomicUsize,
    compactions: AtomicUsize,
}

impl crate::provider::Provider for NoSummaries {
    fn name(&self) -> &str {
        "fake"
    }

    fn model(&self) -> &str {
        "fake-model"
    }

    fn with_model(&self, _model: &str) -> Option<Arc<dyn crate::provider::Provider>> {
        None
    }

    fn stream(&self, request: crate::provider::ProviderRequest) -> crate::provider::ProviderStream {
        use crate::provider::Purpose;
        let compaction = request.purpose == Purpose::Compaction;
        let n = match compaction {
            true => self.compactions.fetch_add(1, Ordering::SeqCst),
            false => self.steps.fetch_add(1, Ordering::SeqCst),
        };
        crate::provider::ProviderStream::spawn(move |tx| async move {
            if compaction {
                tx.send(Err(ProviderError::fatal("tools must be defined")))
                    .await;
                return;
            }
            two_calls_then_done(&tx, n).await;
        })
    }
}

/// Step `n` of a turn of three: a tool call, another, then text.
async fn two_calls_then_done(tx: &crate::provider::StreamSender, n: usize) {
    use crate::provider::{ProviderEvent, ToolCall};
    if n % 3 == 2 {
        tx.send(Ok(ProviderEvent::TextDelta("Done.".into()))).await;
        tx.send(Ok(ProviderEvent::Finish(Finish::Stop))).await;
    } else {
        tx.send(Ok(ProviderEvent::ToolCall(ToolCall {
            call_id: format!("call_{n}"),
            tool: "list_dir".into(),
            input: json!({"path": "."}),
        })))
        .await;
        tx.send(Ok(ProviderEvent::Finish(Finish::ToolCalls))).await;
    }
}

/// Answers steps as [`NoSummaries`] does; its first `busy` compaction requests are
/// refused as overloaded (come back in a millisecond), the rest summarise.
#[derive(Debug, Default)]
struct BusySummaries {
    busy: usize,
    steps: AtomicUsize,
    compactions: AtomicUsize,
}

impl crate::provider::Provider for BusySummaries {
    fn name(&self) -> &str {
        "fake"
    }

    fn model(&self) -> &str {
        "fake-model"
    }

    fn with_model(&self, _model: &str) -> Option<Arc<dyn crate::provider::Provider>> {
        None
    }

    fn stream(&self, request: crate::provider::ProviderRequest) -> crate::provider::ProviderStream {
        use crate::provider::{ErrorKind, ProviderEvent, Purpose};
        let compaction = request.purpose == Purpose::Compaction;
        let n = match compaction {
            true => self.compactions.fetch_add(1, Ordering::SeqCst),
            false => self.steps.fetch_add(1, Ordering::SeqCst),
        };
        let busy = self.busy;
        crate::provider::ProviderStream::spawn(move |tx| async move {
            if compaction && n < busy {
                let mut overloaded =
                    ProviderError::retryable("overloaded").of_kind(ErrorKind::Overloaded);
                overloaded.retry_after = Some(Duration::from_millis(1));
                tx.send(Err(overloaded)).await;
            } else if compaction {
                tx.send(Ok(ProviderEvent::TextDelta("Listed the directory.".into())))
                    .await;
                tx.send(Ok(ProviderEvent::Finish(Finish::Stop))).await;
            } else {
                two_calls_then_done(&tx, n).await;
            }
        })
    }
}

/// Runs one prompt on `provider` with a budget every step is over; returns the
/// retries announced, the transcript's compaction summaries, and the warnings of
/// its assistants.
async fn compacting_turn(
    provider: Arc<BusySummaries>,
    max_attempts: u32,
) -> (Vec<(u32, u32, String)>, usize, Vec<String>) {
    let dir = TestDir::new();
    let mut config = Config::default();
    config.compaction.token_budget = 10;
    config.provider.max_attempts = max_attempts;
    let engine = engine(
        &dir,
        SystemClock::shared(),
        config,
        provider,
        ToolRegistry::standard(),
        yes(),
    )
    .await;
    let mut events = engine.subscribe();
    let session = engine.create_session("t", &dir.work()).await.unwrap();
    engine
        .admit(&session.id, "list it", Delivery::Queue)
        .await
        .unwrap();
    assert_eq!(
        engine.wait_idle(&session.id).await,
        Some(SessionOutcome::Ran(Outcome::Idle))
    );
    let mut retries = Vec::new();
    while let Ok(event) = events.try_recv() {
        if let crate::runner::EngineEvent::Retrying {
            attempt, of, error, ..
        } = event
        {
            retries.push((attempt, of, error));
        }
    }
    let transcript = messages(&engine, &session.id).await;
    let summaries = transcript
        .iter()
        .filter(|m| {
            matches!(&m.data, MessageData::Synthetic(s) if s.kind == crate::message::SyntheticKind::Compaction)
        })
        .count();
    let warnings = transcript
        .iter()
        .filter_map(|m| m.data.as_assistant())
        .flat_map(|a| a.warnings.clone())
        .collect();
    assert_eq!(claim_of(&engine, &session.id).await, None);
    doctor_ok(&engine).await;
    engine.shutdown().await.unwrap();
    (retries, summaries, warnings)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r4_18_a_compaction_refused_for_load_is_retried_as_a_step_is() {
    // Overloaded twice, then a summary: the third attempt compacts.
    let provider = Arc::new(BusySummaries {
        busy: 2,
        ..BusySummaries::default()
    });
    let (retries, summaries, warnings) = compacting_turn(provider.clone(), 3).await;
    assert_eq!(provider.compactions.load(Ordering::SeqCst), 3);
    assert_eq!(
        retries,
        vec![
            (2, 3, "overloaded".to_string()),
            (3, 3, "overloaded".to_string())
        ]
    );
    assert_eq!((summaries, warnings), (1, Vec::<String>::new()));
    assert_eq!(provider.steps.load(Ordering::SeqCst), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i13_a_compaction_still_refused_after_its_retries_is_not_tried_again_that_turn() {
    let provider = Arc::new(BusySummaries {
        busy: usize::MAX,
        ..BusySummaries::default()
    });
    let (retries, summaries, warnings) = compacting_turn(provider.clone(), 2).await;
    // Its attempts once, though every step after the first is over budget.
    assert_eq!(provider.compactions.load(Ordering::SeqCst), 2);
    assert_eq!(retries.len(), 1);
    assert_eq!(summaries, 0);
    assert_eq!(
        warnings,
        ["the conversation could not be compacted (overloaded): it was sent whole"]
    );
    assert_eq!(provider.steps.load(Ordering::SeqCst), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i13_a_failed_compaction_is_tried_once_a_turn_and_said() {
    let dir = TestDir::new();
    let mut config = Config::default();
    config.compaction.token_budget = 10;
    let provider = Arc::new(NoSummaries::default());
    let engine = engine(
        &dir,
        SystemClock::shared(),
        config,
        provider.clone(),
        ToolRegistry::standard(),
        yes(),
    )
    .await;
    let session = engine.create_session("t", &dir.work()).await.unwrap();
    for (turn, prompt) in ["first", "second"].into_iter().enumerate() {
        engine
            .admit(&session.id, prompt, Delivery::Queue)
            .await
            .unwrap();
        assert_eq!(
            engine.wait_idle(&session.id).await,
            Some(SessionOutcome::Ran(Outcome::Idle))
        );
        // Over budget before every step but the first, yet asked once a turn.
        assert_eq!(provider.compactions.load(Ordering::SeqCst), turn + 1);
        assert_eq!(provider.steps.load(Ordering::SeqCst), 3 * (turn + 1));
    }
    let transcript = messages(&engine, &session.id).await;
    let warned: Vec<(usize, Vec<String>)> = transcript
        .iter()
        .filter_map(|m| m.data.as_assistant())
        .enumerate()
        .filter(|(_, a)| !a.warnings.is_empty())
        .map(|(i, a)| (i, a.warnings.clone()))
        .collect();
    let warning =
        "the conversation could not be compacted (tools must be defined): it was sent whole";
    // The step after each failure says so: the second of the first turn, the first
    // of the second (compacted at rest, before it).
    assert_eq!(
        warned,
        vec![
            (1, vec![warning.to_string()]),
            (3, vec![warning.to_string()])
        ]
    );
    assert_eq!(claim_of(&engine, &session.id).await, None);
    doctor_ok(&engine).await;
    engine.shutdown().await.unwrap();
}

/// A prompt of `text` and `links` (files of the session's directory `work`).
fn with_links(work: &std::path::Path, text: &str, links: &[&str]) -> Vec<PromptBlock> {
    let mut blocks = vec![PromptBlock::Text { text: text.into() }];
    blocks.extend(links.iter().map(|name| PromptBlock::Link {
        uri: format!("file://{}", work.join(name).display()),
        name: name.to_string(),
        title: None,
        mime_type: None,
    }));
    blocks
}

/// The text of the user messages of `request`.
fn user_texts(request: &crate::provider::ProviderRequest) -> String {
    request
        .messages
        .iter()
        .filter_map(|m| match m {
            ChatMessage::User(t) => Some(t.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r4_20_a_prompt_s_files_and_resources_reach_the_model_redacted_and_bounded() {
    let dir = TestDir::new();
    let work = std::path::PathBuf::from(dir.work()).canonicalize().unwrap();
    // PATH stands for the provider's key: its value is hidden.
    let key = std::env::var("PATH").unwrap();
    let mut config = Config::default();
    config.provider.api_key_env = Some("PATH".into());
    std::fs::write(work.join(".env"), format!("key={key}\n")).unwrap();
    let mut names = vec![".env".to_string()];
    for i in 0..12 {
        let name = format!("part{i:02}.txt");
        std::fs::write(work.join(&name), "y".repeat(100_000)).unwrap();
        names.push(name);
    }
    let provider = FakeProvider::new(vec![Answer::text("ok")]);
    let engine = engine(
        &dir,
        SystemClock::shared(),
        config,
        provider.clone(),
        ToolRegistry::standard(),
        yes(),
    )
    .await;
    let session = engine.create_session("t", &dir.work()).await.unwrap();
    let links: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut blocks = with_links(&work, "look", &links);
    blocks.push(PromptBlock::Resource {
        uri: "file:///w/pasted.env".into(),
        mime_type: None,
        text: Some(format!("token {key}")),
        blob: None,
        size: None,
    });
    let big = MAX_RESOURCE_BYTES + 1000;
    blocks.push(PromptBlock::Resource {
        uri: "file:///w/big.txt".into(),
        mime_type: None,
        text: Some("z".repeat(big)),
        blob: None,
        size: None,
    });
    blocks.push(PromptBlock::Resource {
        uri: "file:///w/big.png".into(),
        mime_type: Some("image/png".into()),
        text: None,
        blob: Some("A".repeat(big)),
        size: None,
    });
    let text = PromptBlock::text_of(&blocks);
    engine
        .admit_content(&session.id, &text, &blocks, Delivery::Queue)
        .await
        .unwrap();
    assert_eq!(
        engine.wait_idle(&session.id).await,
        Some(SessionOutcome::Ran(Outcome::Idle))
    );
    let sent = user_texts(&provider.requests.lock().unwrap()[0]);
    // The key reaches the model from neither the linked file nor the resource.
    assert!(!sent.contains(&key), "the hidden value was sent");
    assert!(sent.contains("key=<redacted>"), "{}", &sent[..2000]);
    assert!(sent.contains("token <redacted>"));
    // The linked files: at most 256 KiB of them, the rest named with why.
    let files = sent.matches(&"y".repeat(100_000)).count();
    assert_eq!(files, 2, "two files of 100 kB fit in 256 KiB");
    assert_eq!(
        sent.matches("fill the 262144 bytes one request may hold")
            .count()
            + sent.matches("left of the 262144").count(),
        10,
    );
    // The embedded text cut at the limit, with a note; the blob named, not sent.
    assert!(sent.contains(&format!(
        "The prompt's resource file:///w/big.txt is {big} bytes: only its first {MAX_RESOURCE_BYTES} are shown."
    )));
    assert!(!sent.contains(&"z".repeat(MAX_RESOURCE_BYTES + 1)));
    assert!(sent.contains("file:///w/big.png is binary (image/png)"));
    // What is kept: the resource redacted and cut, the large blob not kept.
    let transcript = messages(&engine, &session.id).await;
    let MessageData::User(user) = &transcript[0].data else {
        panic!("{:?}", transcript[0]);
    };
    let stored = serde_json::to_string(&user.content).unwrap();
    assert!(!stored.contains(&key));
    assert!(stored.contains("token <redacted>"));
    assert!(
        !stored.contains(&"A".repeat(1000)),
        "the large blob was kept"
    );
    assert!(matches!(
        &user.content[user.content.len() - 2],
        PromptBlock::Resource { text: Some(t), size: Some(s), .. }
            if t.len() == MAX_RESOURCE_BYTES && *s == big as u64
    ));
    assert!(matches!(
        &user.content[user.content.len() - 1],
        PromptBlock::Resource { blob: None, size: Some(s), .. } if *s == big as u64
    ));
    engine.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r4_20_linked_files_count_in_the_compaction_budget() {
    let dir = TestDir::new();
    let work = std::path::PathBuf::from(dir.work()).canonicalize().unwrap();
    std::fs::write(work.join("a.txt"), "a".repeat(100_000)).unwrap();
    std::fs::write(work.join("b.txt"), "b".repeat(100_000)).unwrap();
    let mut config = Config::default();
    // The text alone is far below it; with the files (~50,000 tokens), above.
    config.compaction.token_budget = 30_000;
    let provider = FakeProvider::new(vec![Answer::text("ok")]);
    let engine = engine(
        &dir,
        SystemClock::shared(),
        config,
        provider.clone(),
        ToolRegistry::standard(),
        yes(),
    )
    .await;
    let session = engine.create_session("t", &dir.work()).await.unwrap();
    let blocks = with_links(&work, "read these", &["a.txt", "b.txt"]);
    let text = PromptBlock::text_of(&blocks);
    engine
        .admit_content(&session.id, &text, &blocks, Delivery::Queue)
        .await
        .unwrap();
    assert_eq!(
        engine.wait_idle(&session.id).await,
        Some(SessionOutcome::Ran(Outcome::Idle))
    );
    engine
        .admit(&session.id, "and now?", Delivery::Queue)
        .await
        .unwrap();
    assert_eq!(
        engine.wait_idle(&session.id).await,
        Some(SessionOutcome::Ran(Outcome::Idle))
    );
    let kinds = event_kinds(&engine, &session.id).await;
    assert!(
        kinds.contains(&"compaction.ended"),
        "the linked files were not counted: {kinds:?}"
    );
    // After the summary, the files are no longer sent.
    let last = user_texts(provider.requests.lock().unwrap().last().unwrap());
    assert!(!last.contains(&"a".repeat(1000)), "{}", &last[..200]);
    engine.shutdown().await.unwrap();
}
