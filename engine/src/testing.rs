//! Fixtures for the engine's own tests: engines over temp databases, and fake
//! providers, tools and permissions that count what they are asked.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{Notify, broadcast};

use crate::claim::{self, Acquire, Fenced};
use crate::clock::SharedClock;
use crate::config::Config;
use crate::db::Db;
use crate::events::{Delivery, Event};
use crate::message::Finish;
use crate::phase::PhaseChange;
use crate::provider::{
    Provider, ProviderError, ProviderEvent, ProviderRequest, ProviderStream, ToolCall, ToolSpec,
};
use crate::runner::EngineEvent;
use crate::store::Store;
use crate::store::events::append_unowned;
use crate::store::rows;
use crate::tools::{
    BoxFuture, Decision, Permission, PermissionRequest, Prepared, Tool, ToolContext, ToolOutput,
    ToolRegistry,
};
use crate::{Engine, EngineOptions};

/// A temp directory with a database and an owners directory.
pub(crate) struct TestDir {
    pub dir: tempfile::TempDir,
}

impl TestDir {
    pub fn new() -> TestDir {
        TestDir {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub fn db(&self, clock: &SharedClock) -> Db {
        Db::start(Store::open(&self.database(), clock.as_ref()).unwrap())
    }

    /// `<dir>/data/steward.db`: the data directory apart from the sessions'
    /// directories, as a user's is (Steward's own files ask every time).
    pub fn database(&self) -> std::path::PathBuf {
        let data = self.dir.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        data.join("steward.db")
    }

    pub fn owners(&self) -> std::path::PathBuf {
        self.dir.path().join("data/owners")
    }

    pub fn work(&self) -> String {
        let work = self.dir.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        work.to_string_lossy().into_owned()
    }
}

pub(crate) async fn engine(
    dir: &TestDir,
    clock: SharedClock,
    config: Config,
    provider: Arc<dyn Provider>,
    tools: ToolRegistry,
    permission: Arc<dyn Permission>,
) -> Engine {
    Engine::start(EngineOptions {
        db: dir.db(&clock),
        owners_dir: dir.owners(),
        clock,
        config,
        provider,
        tools,
        permission,
    })
    .await
    .unwrap()
}

/// An engine with the default config over `provider`, the standard tools, and every
/// tool allowed.
pub(crate) async fn default_engine(dir: &TestDir, provider: Arc<dyn Provider>) -> Engine {
    engine(
        dir,
        crate::clock::SystemClock::shared(),
        Config::default(),
        provider,
        ToolRegistry::standard(),
        Arc::new(crate::tools::Headless { allow_all: true }),
    )
    .await
}

/// Waits (up to 10 s) for the next committed event of `kind`.
pub(crate) async fn committed(
    events: &mut broadcast::Receiver<EngineEvent>,
    kind: &str,
) -> crate::events::EventRecord {
    match wait_for_event(
        events,
        |e| matches!(e, EngineEvent::Committed(r) if r.event.kind() == kind),
    )
    .await
    {
        EngineEvent::Committed(record) => record,
        other => unreachable!("{other:?}"),
    }
}

/// One scripted answer of a [`FakeProvider`].
#[derive(Debug, Clone, Default)]
pub(crate) struct Answer {
    pub text: Vec<String>,
    pub calls: Vec<(String, Value)>,
    /// Wait for [`FakeProvider::release`] after the text, before the rest.
    pub hold: bool,
    pub delay: Duration,
    pub error: Option<ProviderError>,
}

impl Answer {
    pub fn text(text: &str) -> Answer {
        Answer {
            text: vec![text.to_string()],
            ..Answer::default()
        }
    }

    pub fn call(tool: &str, input: Value) -> Answer {
        Answer {
            calls: vec![(tool.to_string(), input)],
            ..Answer::default()
        }
    }
}

/// Answers call *n* with answer *n* (the last one repeats) and records each request.
#[derive(Debug)]
pub(crate) struct FakeProvider {
    answers: Vec<Answer>,
    pub calls: AtomicUsize,
    pub requests: Mutex<Vec<ProviderRequest>>,
    pub release: Arc<Notify>,
}

impl FakeProvider {
    pub fn new(answers: Vec<Answer>) -> Arc<FakeProvider> {
        Arc::new(FakeProvider {
            answers,
            calls: AtomicUsize::new(0),
            requests: Mutex::new(Vec::new()),
            release: Arc::new(Notify::new()),
        })
    }

    pub fn count(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

impl Provider for FakeProvider {
    fn name(&self) -> &str {
        "fake"
    }

    fn with_model(&self, _model: &str) -> Option<Arc<dyn Provider>> {
        None
    }

    fn model(&self) -> &str {
        "fake-model"
    }

    fn stream(&self, request: ProviderRequest) -> ProviderStream {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        self.requests.lock().unwrap().push(request);
        let answer = self.answers[n.min(self.answers.len() - 1)].clone();
        let release = self.release.clone();
        ProviderStream::spawn(move |tx| async move {
            for chunk in answer.text {
                if !answer.delay.is_zero() {
                    tokio::time::sleep(answer.delay).await;
                }
                tx.send(Ok(ProviderEvent::TextDelta(chunk))).await;
            }
            if answer.hold {
                release.notified().await;
            }
            if let Some(error) = answer.error {
                tx.send(Err(error)).await;
                return;
            }
            let has_calls = !answer.calls.is_empty();
            for (i, (tool, input)) in answer.calls.into_iter().enumerate() {
                tx.send(Ok(ProviderEvent::ToolCall(ToolCall {
                    call_id: format!("call_{n}_{i}"),
                    tool,
                    input,
                })))
                .await;
            }
            let finish = if has_calls {
                Finish::ToolCalls
            } else {
                Finish::Stop
            };
            tx.send(Ok(ProviderEvent::Finish(finish))).await;
        })
    }
}

/// A tool that counts its calls and answers with a fixed output.
#[derive(Debug)]
pub(crate) struct FakeTool {
    pub name: String,
    pub prepares: Arc<AtomicUsize>,
    pub runs: Arc<AtomicUsize>,
}

impl FakeTool {
    pub fn new(name: &str) -> Arc<FakeTool> {
        Arc::new(FakeTool {
            name: name.to_string(),
            prepares: Arc::new(AtomicUsize::new(0)),
            runs: Arc::new(AtomicUsize::new(0)),
        })
    }
}

impl Tool for FakeTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name.clone(),
            description: "a fake".into(),
            parameters: serde_json::json!({"type": "object"}),
        }
    }

    fn prepare(&self, _ctx: &ToolContext, _input: &Value) -> BoxFuture<Result<Prepared, String>> {
        self.prepares.fetch_add(1, Ordering::SeqCst);
        let runs = self.runs.clone();
        let output = format!("{} ran", self.name);
        Box::pin(async move {
            Ok(Prepared::new(None, move |_stop| {
                Box::pin(async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    ToolOutput::Completed {
                        output,
                        structured: None,
                    }
                })
            }))
        })
    }
}

/// A tool whose run never ends and ignores every stop signal (a read blocked on a
/// FIFO, a hung network file system).
#[derive(Debug)]
pub(crate) struct HangingTool;

impl Tool for HangingTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "hang".into(),
            description: "never ends".into(),
            parameters: serde_json::json!({"type": "object"}),
        }
    }

    fn prepare(&self, _ctx: &ToolContext, _input: &Value) -> BoxFuture<Result<Prepared, String>> {
        Box::pin(async move {
            Ok(Prepared::new(None, move |_stop| {
                Box::pin(std::future::pending::<ToolOutput>())
            }))
        })
    }
}

/// A permission that blocks until released, then answers as told.
#[derive(Debug)]
pub(crate) struct GatePermission {
    pub release: Arc<Notify>,
    pub asked: AtomicUsize,
    pub allow: bool,
}

impl Permission for GatePermission {
    fn decide(&self, _request: PermissionRequest) -> BoxFuture<Decision> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        let release = self.release.clone();
        let allow = self.allow;
        Box::pin(async move {
            release.notified().await;
            if allow {
                Decision::Allow
            } else {
                Decision::Deny("denied by the test".into())
            }
        })
    }
}

/// Waits (up to 10 s) for a committed event matching `pred`.
pub(crate) async fn wait_for_event(
    events: &mut broadcast::Receiver<EngineEvent>,
    pred: impl Fn(&EngineEvent) -> bool,
) -> EngineEvent {
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match events.recv().await {
                Ok(event) if pred(&event) => return event,
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(e) => panic!("events closed: {e}"),
            }
        }
    })
    .await
    .expect("the event never came")
}

/// How far an interrupted execution got.
#[derive(Clone)]
pub(crate) enum Stage {
    /// Claimed and promoted, no assistant yet.
    Promoted,
    /// An assistant whose provider request is in flight (phase `unknown`).
    Streaming,
    /// An assistant with three tool calls: one completed, one running, one pending.
    Tools,
    /// As `Tools`, with this process recorded for the running call.
    ToolsWithProcess(crate::message::ProcessIdentity),
    /// The step asked for one tool, which was running (no tool finished).
    ToolRunning,
    /// The first step's tool finished and a second step was streaming.
    SecondStep,
}

/// A session whose execution (owner `own_gone`) was interrupted at `stage`.
pub(crate) fn interrupted(store: &mut Store, session: &str, stage: Stage, at: i64) -> String {
    store
        .write(|tx| {
            if rows::session(tx, session)?.is_none() {
                append_unowned(
                    tx,
                    session,
                    at,
                    Event::SessionCreated {
                        title: "t".into(),
                        directory: "/w".into(),
                    },
                )?;
            }
            let input = format!("inp_{session}_{at}");
            append_unowned(
                tx,
                session,
                at,
                Event::InputAdmitted {
                    content: Vec::new(),
                    input_id: input.clone(),
                    prompt: "do the thing".into(),
                    delivery: Delivery::Queue,
                    wake_pending: true,
                    continuation_of: None,
                },
            )?;
            let Acquire::Acquired(claim) = claim::acquire(tx, session, "own_gone", at, 30_000)?
            else {
                panic!("not acquired")
            };
            let mut f = Fenced::check(tx, &claim, at)?;
            f.append(Event::InputPromoted {
                input_id: input,
                message_id: format!("msg_u_{}", claim.execution_id),
            })?;
            f.change_phase(PhaseChange::WorkStarted)?;
            if matches!(stage, Stage::Promoted) {
                return Ok(claim.execution_id);
            }
            let message = format!("msg_a_{}", claim.execution_id);
            f.append(Event::StepStarted {
                tools: None,
                message_id: message.clone(),
                execution_id: claim.execution_id.clone(),
                provider: "fake".into(),
                model: "fake-model".into(),
            })?;
            f.set_assistant(&message)?;
            f.change_phase(PhaseChange::Dispatched)?;
            if matches!(stage, Stage::Streaming) {
                return Ok(claim.execution_id);
            }
            f.append(Event::StepEnded {
                warnings: Vec::new(),
                message_id: message.clone(),
                finish: crate::message::Finish::ToolCalls,
                usage: None,
            })?;
            f.change_phase(PhaseChange::StepSettled)?;
            if matches!(stage, Stage::SecondStep) {
                f.append(Event::ToolCalled {
                    message_id: message.clone(),
                    part_id: "prt_first".into(),
                    call_id: "first".into(),
                    tool: "list_dir".into(),
                    input: serde_json::json!({"path": "."}),
                })?;
                f.append(Event::ToolStarted {
                    mcp: None,
                    message_id: message.clone(),
                    call_id: "first".into(),
                    process: None,
                })?;
                f.append(Event::ToolCompleted {
                    message_id: message,
                    call_id: "first".into(),
                    output: "ok".into(),
                    structured: None,
                })?;
                let second = format!("msg_b_{}", claim.execution_id);
                f.append(Event::StepStarted {
                    tools: None,
                    message_id: second.clone(),
                    execution_id: claim.execution_id.clone(),
                    provider: "fake".into(),
                    model: "fake-model".into(),
                })?;
                f.set_assistant(&second)?;
                f.change_phase(PhaseChange::Dispatched)?;
                return Ok(claim.execution_id);
            }
            if matches!(stage, Stage::ToolRunning) {
                f.append(Event::ToolCalled {
                    message_id: message.clone(),
                    part_id: "prt_running".into(),
                    call_id: "running".into(),
                    tool: "run_command".into(),
                    input: serde_json::json!({"command": "crash"}),
                })?;
                f.append(Event::ToolStarted {
                    mcp: None,
                    message_id: message,
                    call_id: "running".into(),
                    process: None,
                })?;
                return Ok(claim.execution_id);
            }
            for call in ["done", "running", "pending"] {
                f.append(Event::ToolCalled {
                    message_id: message.clone(),
                    part_id: format!("prt_{call}"),
                    call_id: call.into(),
                    tool: "run_command".into(),
                    input: serde_json::json!({"command": call}),
                })?;
            }
            for call in ["done", "running"] {
                let process = match (&stage, call) {
                    (Stage::ToolsWithProcess(p), "running") => Some(p.clone()),
                    _ => None,
                };
                f.append(Event::ToolStarted {
                    mcp: None,
                    message_id: message.clone(),
                    call_id: call.into(),
                    process,
                })?;
            }
            f.append(Event::ToolCompleted {
                message_id: message,
                call_id: "done".into(),
                output: "ok".into(),
                structured: None,
            })?;
            Ok(claim.execution_id)
        })
        .unwrap()
}

/// A tool wrapper left running as after its owner's death (no parent watching it):
/// the child, and its identity as `tool.started` records it.
pub(crate) fn leftover_wrapper(
    command: &str,
) -> (std::process::Child, crate::message::ProcessIdentity) {
    use std::io::Write;
    let mut cmd = std::process::Command::new("sh");
    cmd.args([
        "-c",
        crate::tools::process::WRAPPER,
        crate::tools::process::WRAPPER_NAME,
        command,
    ])
    .stdin(std::process::Stdio::piped());
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut child = cmd.spawn().unwrap();
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let identity = crate::tools::process::identify(child.id() as i32).unwrap();
    (child, identity)
}

/// The `session` table as a file migrated only up to `0005_tool_list` holds it.
pub(crate) const SESSION_BEFORE_0006: &str =
    "(SELECT id, title, directory, time_created, time_updated FROM session)";

/// Runs `f`, which writes through today's code, on a file migrated only up to
/// `0005_tool_list`: the column `0006_session_housekeeping` adds is there while `f`
/// runs, and gone after, so the file is as an older build left it.
pub(crate) fn on_old_schema<R>(store: &mut Store, f: impl FnOnce(&mut Store) -> R) -> R {
    store
        .conn()
        .execute_batch("ALTER TABLE session ADD COLUMN archived INTEGER NOT NULL DEFAULT 0")
        .unwrap();
    let out = f(store);
    store
        .conn()
        .execute_batch("ALTER TABLE session DROP COLUMN archived")
        .unwrap();
    out
}
