//! The ACP methods over the engine: `initialize`, `session/new`, `session/load`,
//! `session/list`, `session/prompt`, `session/cancel`, and the permission questions
//! the engine asks through `session/request_permission`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agent_client_protocol_schema::ProtocolVersion;
use agent_client_protocol_schema::v1::{
    AgentCapabilities, CancelNotification, ContentBlock, Implementation, InitializeRequest,
    InitializeResponse, ListSessionsRequest, ListSessionsResponse, LoadSessionRequest,
    LoadSessionResponse, NewSessionRequest, NewSessionResponse, PermissionOption,
    PermissionOptionKind, PromptRequest, PromptResponse, RequestPermissionOutcome,
    RequestPermissionRequest, RequestPermissionResponse, SessionCapabilities, SessionInfo,
    SessionListCapabilities, StopReason, ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields,
};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use steward_engine::events::Event;
use steward_engine::inspect::pages::PageRequest;
use steward_engine::tools::{BoxFuture, Decision, Permission, PermissionRequest};
use steward_engine::{Engine, EngineEvent, Error, Outcome, SessionOutcome};

use super::transport::{
    INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND, Outbox, RESOURCE_NOT_FOUND,
};
use super::updates;
use super::views::{TurnGuard, Views};

/// A JSON-RPC error: code and message.
pub type Failure = (i64, String);

/// Sessions listed per page.
const LIST_PAGE: usize = 100;

/// What the methods share.
#[derive(Debug)]
pub struct Agent {
    pub engine: Arc<Engine>,
    pub outbox: Outbox,
    pub views: Arc<Views>,
    /// True once the engine has shut down (stdin closed).
    pub shut_down: tokio::sync::watch::Receiver<bool>,
    pub database: PathBuf,
    pub owners: PathBuf,
    /// The read-only view `session/list` pages through, opened at its first use.
    pub reader: Arc<std::sync::Mutex<Option<steward_engine::inspect::Reader>>>,
}

/// What follows an answer.
#[derive(Debug)]
pub enum FollowUp {
    Nothing,
    /// Start the session's due wake.
    Wake(String),
}

/// A request, read and accepted in the order it arrived.
#[derive(Debug)]
pub enum Accepted {
    Initialize(Box<InitializeRequest>),
    New(NewSessionRequest),
    Load(LoadSessionRequest),
    List(ListSessionsRequest),
    /// A prompt holds its session's turn from the moment it arrived, so that a
    /// `session/cancel` right behind it finds it.
    Prompt(PromptRequest, TurnGuard),
}

fn params<T: DeserializeOwned>(params: Value) -> Result<T, Failure> {
    serde_json::from_value(params).map_err(|e| (INVALID_PARAMS, format!("invalid params: {e}")))
}

fn to_value<T: serde::Serialize>(value: T) -> Result<Value, Failure> {
    serde_json::to_value(value).map_err(|e| (INTERNAL_ERROR, e.to_string()))
}

fn engine_failure(e: Error) -> Failure {
    match e {
        Error::NotFound { .. } => (RESOURCE_NOT_FOUND, e.to_string()),
        Error::SessionBusy { .. } => (
            INTERNAL_ERROR,
            format!("{e}: the session is held by another live owner"),
        ),
        other => (INTERNAL_ERROR, other.to_string()),
    }
}

/// An absolute directory as sessions store it: resolved when it exists, otherwise
/// with `.` and trailing separators removed. A relative path is refused.
fn directory_key(path: &Path) -> Result<PathBuf, Failure> {
    if !path.is_absolute() {
        return Err((
            INVALID_PARAMS,
            format!("cwd {} is not an absolute path", path.display()),
        ));
    }
    Ok(path
        .canonicalize()
        .unwrap_or_else(|_| path.components().collect()))
}

impl Agent {
    /// Reads a request as it arrives (in order: nothing here waits).
    pub fn accept(&self, method: &str, p: Value) -> Result<Accepted, Failure> {
        Ok(match method {
            "initialize" => Accepted::Initialize(Box::new(params(p)?)),
            "session/new" => Accepted::New(params(p)?),
            "session/load" => {
                let request: LoadSessionRequest = params(p)?;
                // Open (and loading) from the moment it arrives: a prompt right
                // behind it is taken, and runs once the load has answered.
                self.views.begin_load(&request.session_id.0);
                Accepted::Load(request)
            }
            "session/list" => Accepted::List(params(p)?),
            "session/prompt" => {
                let request: PromptRequest = params(p)?;
                let turn = self.views.begin_turn(&request.session_id.0)?;
                Accepted::Prompt(request, turn)
            }
            other => return Err((METHOD_NOT_FOUND, format!("method not found: {other}"))),
        })
    }

    /// Answers an accepted request; then what follows the answer.
    pub async fn handle(&self, request: Accepted) -> (Result<Value, Failure>, FollowUp) {
        match request {
            Accepted::Initialize(r) => (self.initialize(r), FollowUp::Nothing),
            Accepted::New(r) => (self.new_session(r).await, FollowUp::Nothing),
            Accepted::Load(r) => {
                let session = r.session_id.0.to_string();
                match self.load(r).await {
                    Ok(answer) => (Ok(answer), FollowUp::Wake(session)),
                    Err(e) => (Err(e), FollowUp::Nothing),
                }
            }
            Accepted::List(r) => (self.list(r).await, FollowUp::Nothing),
            Accepted::Prompt(r, turn) => (self.prompt(r, turn).await, FollowUp::Nothing),
        }
    }

    /// Runs what follows an answer: a loaded session's due wake starts once the
    /// client has its transcript, so what it does streams live.
    pub async fn follow_up(&self, follow_up: FollowUp) {
        if let FollowUp::Wake(session) = follow_up
            && let Err(e) = self.engine.redrive_wakes_of(&session).await
        {
            tracing::error!(session = %session, error = %e, "starting the session's wake failed");
        }
    }

    /// [`Agent::accept`], [`Agent::handle`] and [`Agent::follow_up`].
    #[cfg(test)]
    pub async fn call(&self, method: &str, p: Value) -> Result<Value, Failure> {
        let accepted = self.accept(method, p)?;
        let (answer, then) = self.handle(accepted).await;
        self.follow_up(then).await;
        answer
    }

    /// Takes one notification (unknown ones are ignored, as JSON-RPC says).
    pub fn notify(&self, method: &str, p: Value) {
        if method == "session/cancel" {
            match params::<CancelNotification>(p) {
                Ok(cancel) => {
                    let session = &cancel.session_id.0;
                    if self.views.cancel(session) {
                        self.engine.cancel(session);
                    }
                }
                Err((_, e)) => tracing::warn!(error = %e, "a bad session/cancel"),
            }
        }
    }

    fn initialize(&self, _request: Box<InitializeRequest>) -> Result<Value, Failure> {
        let capabilities = AgentCapabilities::new()
            .load_session(true)
            .session_capabilities(SessionCapabilities::new().list(SessionListCapabilities::new()));
        to_value(
            InitializeResponse::new(ProtocolVersion::V1)
                .agent_capabilities(capabilities)
                .agent_info(Implementation::new("steward", env!("CARGO_PKG_VERSION"))),
        )
    }

    async fn new_session(&self, request: NewSessionRequest) -> Result<Value, Failure> {
        let cwd = request.cwd;
        if !cwd.is_absolute() || !cwd.is_dir() {
            return Err((
                INVALID_PARAMS,
                format!(
                    "cwd {} is not an absolute path to a directory",
                    cwd.display()
                ),
            ));
        }
        if !request.mcp_servers.is_empty() {
            tracing::warn!(
                servers = request.mcp_servers.len(),
                "MCP servers are not supported: the session runs with Steward's own tools"
            );
        }
        let cwd = cwd
            .canonicalize()
            .map_err(|e| (INVALID_PARAMS, e.to_string()))?;
        let title = cwd
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| cwd.display().to_string());
        let session = self
            .engine
            .create_session(&title, &cwd.to_string_lossy())
            .await
            .map_err(engine_failure)?;
        // Its only event so far is its creation (seq 0).
        self.views.open_new(&session.id, 0);
        to_value(NewSessionResponse::new(session.id))
    }

    /// Sends the session's transcript, after reconciling what a crash elsewhere
    /// left of it. Its due wake starts after the answer ([`Agent::follow_up`]).
    async fn load(&self, request: LoadSessionRequest) -> Result<Value, Failure> {
        let id = request.session_id.0.to_string();
        let loaded = async {
            if !self.engine.session_exists(&id).await? {
                return Err(Error::NotFound {
                    kind: "session",
                    id: id.clone(),
                });
            }
            self.engine.recover_if_due().await?;
            self.engine.transcript(&id).await
        }
        .await;
        let (messages, through) = match loaded {
            Ok(loaded) => loaded,
            Err(e) => {
                self.views.abandon_load(&id);
                return Err(engine_failure(e));
            }
        };
        self.views.finish_load(&id, &messages, through);
        to_value(LoadSessionResponse::new())
    }

    /// Lists sessions through the connection's read-only reader, on a blocking
    /// thread: its SQLite reads (and, at its first use, the check of the file) never
    /// hold one of the runtime's workers.
    async fn list(&self, request: ListSessionsRequest) -> Result<Value, Failure> {
        let cwd = request.cwd.as_deref().map(directory_key).transpose()?;
        let cwd = cwd.map(|c| c.to_string_lossy().into_owned());
        let (reader, database, owners) = (
            self.reader.clone(),
            self.database.clone(),
            self.owners.clone(),
        );
        tokio::task::spawn_blocking(move || {
            let mut slot = reader.lock().unwrap_or_else(|e| e.into_inner());
            list_sessions(&mut slot, &database, &owners, cwd, request.cursor)
        })
        .await
        .map_err(|e| (INTERNAL_ERROR, format!("listing sessions failed: {e}")))?
    }

    /// Runs a turn: the prompt is admitted (with the session's claim, in one
    /// transaction) and the answer says how the turn ended. Its updates stream
    /// through the forwarder, and the answer waits for them.
    async fn prompt(&self, request: PromptRequest, turn: TurnGuard) -> Result<Value, Failure> {
        let session = request.session_id.0.to_string();
        let text = prompt_text(&request.prompt)?;
        // A prompt sent right behind a load of its session runs after the load.
        tokio::select! {
            loaded = self.views.after_loads(&session) => loaded?,
            () = turn.turn.wait_cancelled() => return to_value(PromptResponse::new(StopReason::Cancelled)),
        }
        let before = self
            .engine
            .last_seq(&session)
            .await
            .map_err(engine_failure)?;
        self.views.expect_prompt(&session, &text);
        let mut events = self.engine.subscribe();
        let input = match self.engine.submit(&session, &text).await {
            Ok(input) => input,
            Err(e) => {
                self.views.forget_prompt(&session, &text);
                return Err(engine_failure(e));
            }
        };
        // The prompt may be queued behind an execution already running (a
        // continuation): a cancel stops whatever runs, and the execution that takes
        // up this prompt too, however late it starts.
        let outcome = {
            let idle = self.engine.wait_idle(&session);
            tokio::pin!(idle);
            if turn.turn.cancelled() {
                self.engine.cancel(&session);
            }
            loop {
                tokio::select! {
                    outcome = &mut idle => break outcome,
                    () = turn.turn.wait_cancelled() => {
                        self.engine.cancel(&session);
                    }
                    event = events.recv() => {
                        let promoted = matches!(
                            &event,
                            Ok(EngineEvent::Committed(record)) if record.session_id == session
                                && matches!(&record.event, Event::InputPromoted { input_id, .. } if *input_id == input.id)
                        );
                        if promoted && turn.turn.cancelled() {
                            self.engine.cancel(&session);
                        }
                    }
                }
            }
        };
        // Another process held the session when this one went to run the prompt it
        // had admitted: that process takes it up (pending inputs run before it lets
        // go of the session), and its turn streams here from the file. The answer
        // waits for it, as for a turn run here.
        let outcome = match outcome {
            Some(SessionOutcome::Busy { owner_id }) => {
                tracing::info!(%session, %owner_id, "the admitted prompt runs in another process");
                let mut check = tokio::time::interval(std::time::Duration::from_millis(250));
                loop {
                    tokio::select! {
                        _ = check.tick() => {
                            if self.engine.input_done(&session, &input.id).await.map_err(engine_failure)? {
                                break Some(SessionOutcome::Ran(Outcome::Idle));
                            }
                        }
                        () = turn.turn.wait_cancelled() => {
                            // The process running it is not this one to cancel.
                            break Some(SessionOutcome::Ran(Outcome::Cancelled));
                        }
                    }
                }
            }
            other => other,
        };
        if outcome == Some(SessionOutcome::Stopped) {
            // Steward is shutting down: its recovery closes the turn; the client
            // hears of that before the answer.
            let mut shut_down = self.shut_down.clone();
            let _ = shut_down.wait_for(|done| *done).await;
        }
        self.views.barrier().await;
        // What a cancellation or a failure closed without an event of its own.
        let turn_messages = self
            .engine
            .messages_after(&session, before)
            .await
            .map_err(engine_failure)?;
        self.views.settle(&session, &turn_messages);
        let stop = match outcome {
            // The turn's own end decides (the session's last execution may be a
            // later one, with nothing left to do).
            _ if turn_was_cancelled(&turn_messages) => StopReason::Cancelled,
            Some(SessionOutcome::Ran(Outcome::Idle)) | None => {
                if turn_hit_a_limit(&turn_messages, "length") {
                    StopReason::MaxTokens
                } else {
                    StopReason::EndTurn
                }
            }
            Some(SessionOutcome::Ran(Outcome::Cancelled)) => StopReason::Cancelled,
            Some(SessionOutcome::Ran(Outcome::Failed(_)))
                if turn_hit_a_limit(&turn_messages, "limit") =>
            {
                StopReason::MaxTurnRequests
            }
            Some(SessionOutcome::Ran(Outcome::Failed(message))) => {
                return Err((INTERNAL_ERROR, format!("the turn failed: {message}")));
            }
            Some(SessionOutcome::Busy { owner_id }) => {
                return Err((
                    INTERNAL_ERROR,
                    format!("session {session} is held by another live owner ({owner_id})"),
                ));
            }
            Some(SessionOutcome::Stopped) => {
                return Err((
                    INTERNAL_ERROR,
                    "the turn was stopped: Steward is shutting down; the next launch continues it"
                        .into(),
                ));
            }
            Some(SessionOutcome::Ran(Outcome::Lost)) => {
                return Err((
                    INTERNAL_ERROR,
                    format!(
                        "the turn stopped: this process lost its claim on session {session} \
                         (its lease ran out, and recovery took the session over); \
                         `steward inspect` shows what became of it"
                    ),
                ));
            }
            Some(SessionOutcome::Ran(Outcome::Error(message)) | SessionOutcome::Error(message)) => {
                return Err((INTERNAL_ERROR, format!("the turn failed: {message}")));
            }
            Some(SessionOutcome::Quarantined {
                execution_id,
                reason,
            }) => {
                return Err((
                    INTERNAL_ERROR,
                    format!(
                        "session {session} is blocked by quarantined execution {execution_id}: \
                         {reason} (`steward wake {execution_id}` retries it)"
                    ),
                ));
            }
            Some(SessionOutcome::AwaitingRecovery { execution_id }) => {
                return Err((
                    INTERNAL_ERROR,
                    format!("session {session}: execution {execution_id} waits for recovery"),
                ));
            }
        };
        drop(turn);
        to_value(PromptResponse::new(stop))
    }
}

/// A page of sessions (of `cwd`, when given) after `cursor`, most recently active
/// first, read through the connection's one reader (opened at its first use, so
/// the file is checked once, not at every list).
fn list_sessions(
    slot: &mut Option<steward_engine::inspect::Reader>,
    database: &Path,
    owners: &Path,
    cwd: Option<String>,
    cursor: Option<String>,
) -> Result<Value, Failure> {
    if slot.is_none() {
        *slot =
            Some(steward_engine::inspect::Reader::open(database, owners).map_err(engine_failure)?);
    }
    let reader = slot.as_mut().expect("opened above");
    if let Some(cursor) = &cursor
        && reader.session(cursor).map_err(engine_failure)?.is_none()
    {
        return Err((INVALID_PARAMS, format!("invalid cursor {cursor}")));
    }
    let mut page = PageRequest {
        after: cursor,
        // Narrows the pages read; the exact match is below.
        filter: cwd.clone(),
        ..PageRequest::first(LIST_PAGE)
    };
    let now = steward_engine::clock::SystemClock::new();
    let mut sessions = Vec::new();
    // With a cwd filter, keep reading pages until one is full or none are left.
    let more = loop {
        let rows = reader
            .sessions(steward_engine::clock::Clock::now_ms(&now), &page)
            .map_err(engine_failure)?;
        let full = rows.len() == LIST_PAGE;
        page.after = rows.last().map(|s| s.id.clone());
        for s in rows {
            if cwd.as_ref().is_none_or(|c| *c == s.directory) {
                sessions.push(
                    SessionInfo::new(s.id, PathBuf::from(&s.directory))
                        .title(s.title)
                        .updated_at(rfc3339(s.time_updated)),
                );
            }
        }
        if sessions.len() >= LIST_PAGE || !full {
            break full;
        }
    };
    let next = more.then(|| page.after.clone()).flatten();
    to_value(ListSessionsResponse::new(sessions).next_cursor(next))
}

/// Whether the turn ended in a user's cancellation: its last message is a
/// cancellation note, or an assistant interrupted without a recovery's part.
fn turn_was_cancelled(turn: &[steward_engine::projection::MessageRow]) -> bool {
    use steward_engine::message::{MessageData, Part, SyntheticKind};
    let Some(last) = turn
        .iter()
        .rev()
        .find(|m| !matches!(m.data, MessageData::User(_)))
    else {
        return false;
    };
    match &last.data {
        MessageData::Synthetic(s) => s.kind == SyntheticKind::Interrupted,
        MessageData::Assistant(a) => {
            a.error.as_ref().is_some_and(|e| e.kind == "interrupted")
                && !a
                    .parts
                    .iter()
                    .any(|p| matches!(p, Part::Text { id, .. } if id.starts_with("recovery:")))
        }
        MessageData::User(_) => false,
    }
}

/// Whether the turn's last assistant ended because of a limit of `kind`: `length`
/// (the provider's token limit, a finish) or `limit` (`agent.max_steps`, an error).
fn turn_hit_a_limit(turn: &[steward_engine::projection::MessageRow], kind: &str) -> bool {
    let Some(last) = turn.iter().rev().find_map(|m| m.data.as_assistant()) else {
        return false;
    };
    match kind {
        "length" => last.finish.is_some_and(|f| f.as_str() == "length"),
        _ => last.error.as_ref().is_some_and(|e| e.kind == kind),
    }
}

/// The prompt as the engine's text: text blocks as they are, resource links as a
/// reference line. Other blocks are not advertised, and are refused.
fn prompt_text(blocks: &[ContentBlock]) -> Result<String, Failure> {
    let mut parts = Vec::new();
    for block in blocks {
        match block {
            ContentBlock::Text(t) => parts.push(t.text.clone()),
            ContentBlock::ResourceLink(link) => {
                parts.push(format!("[{}]({})", link.name, link.uri));
            }
            _ => {
                return Err((
                    INVALID_PARAMS,
                    "only text and resource links are supported in prompts".into(),
                ));
            }
        }
    }
    if parts.is_empty() {
        return Err((INVALID_PARAMS, "the prompt is empty".into()));
    }
    Ok(parts.join("\n"))
}

/// `2026-12-01T12:00:00Z` from milliseconds since the epoch (UTC).
fn rfc3339(ms: i64) -> String {
    let c = steward_engine::clock::Civil::of(ms);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        c.year, c.month, c.day, c.hour, c.minute, c.second
    )
}

/// Tool permission through the client: `session/request_permission` with allow
/// once, allow always (for the rest of the session) and reject. A cancelled
/// request, or a closed connection, denies; so does a session the client did not
/// open, which is never asked about.
#[derive(Debug, Clone)]
pub struct ClientPermission {
    pub outbox: Outbox,
    pub views: Arc<Views>,
}

impl Permission for ClientPermission {
    fn decide(&self, request: PermissionRequest) -> BoxFuture<Decision> {
        let (outbox, views) = (self.outbox.clone(), self.views.clone());
        Box::pin(async move {
            let session = request.session_id.clone();
            let denied = |why: &str| Decision::Deny(format!("Permission denied: {why}"));
            if !views.is_open(&session) {
                return denied("the session is not open in the client");
            }
            let mut fields = ToolCallUpdateFields::new()
                .title(updates::title(&request.tool, &request.input))
                .kind(updates::kind(&request.tool))
                .status(ToolCallStatus::Pending)
                .raw_input(request.input.clone());
            if let Some(guarded) = &request.guarded {
                fields = fields.content(vec![
                    agent_client_protocol_schema::v1::ToolCallContent::from(format!(
                        "It touches {}, {}: asked every time.",
                        guarded.path.display(),
                        guarded.guard.describe()
                    )),
                ]);
            }
            // A call that touches a guarded path asks every time: no "always" is
            // offered for it (and an "always" answer allows it once).
            let mut options = vec![PermissionOption::new(
                "allow_once",
                "Allow once",
                PermissionOptionKind::AllowOnce,
            )];
            if request.guarded.is_none() {
                options.push(PermissionOption::new(
                    "allow_always",
                    format!("Always allow {} in this session", request.tool),
                    PermissionOptionKind::AllowAlways,
                ));
            }
            options.push(PermissionOption::new(
                "reject_once",
                "Reject",
                PermissionOptionKind::RejectOnce,
            ));
            let ask = RequestPermissionRequest::new(
                session.clone(),
                ToolCallUpdate::new(request.call_id.clone(), fields),
                options,
            );
            let Ok(params) = serde_json::to_value(ask) else {
                return denied("the request could not be sent");
            };
            // The client hears of the tool call before it is asked about it.
            views.barrier().await;
            match outbox.request("session/request_permission", params).await {
                Some(Ok(answer)) => {
                    match serde_json::from_value::<RequestPermissionResponse>(answer) {
                        Ok(response) => match response.outcome {
                            RequestPermissionOutcome::Selected(selected) => {
                                match &*selected.option_id.0 {
                                    "allow_once" => Decision::Allow,
                                    "allow_always" => Decision::AllowAlways,
                                    _ => denied("the user rejected the call"),
                                }
                            }
                            RequestPermissionOutcome::Cancelled => {
                                denied("the request was cancelled")
                            }
                            _ => denied("an answer Steward does not know"),
                        },
                        Err(_) => denied("the client's answer could not be read"),
                    }
                }
                Some(Err(error)) => denied(&format!("the client answered with an error: {error}")),
                None => denied("the client went away"),
            }
        })
    }
}

/// A request's `id`, kept to answer it.
pub fn answer(outbox: &Outbox, id: Value, result: Result<Value, Failure>) {
    outbox.send(match result {
        Ok(result) => super::transport::response(id, result),
        Err((code, message)) => super::transport::error_response(id, code, &message),
    });
}

/// A note for the log when a response to no request of ours arrives.
pub fn stray(id: &Value) {
    tracing::warn!(id = %json!(id), "a response to no request of ours was dropped");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc3339_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_796_084_532_000), "2026-12-01T00:22:12Z");
    }
}

#[cfg(test)]
mod turn_tests {
    use super::*;
    use crate::acp::transport::INVALID_REQUEST;
    use crate::acp::transport::Outbox;
    use steward_engine::EngineOptions;
    use steward_engine::config::Config;
    use steward_engine::db::Db;
    use steward_engine::tools::{Headless, ToolRegistry};

    async fn agent(
        dir: &tempfile::TempDir,
        script: &str,
        config: Config,
    ) -> (Arc<Agent>, tokio::sync::mpsc::UnboundedReceiver<Value>) {
        agent_asking(dir, script, config, false).await
    }

    /// An agent whose tool permission is the client's (`ask`) or allows all.
    async fn agent_asking(
        dir: &tempfile::TempDir,
        script: &str,
        config: Config,
        ask: bool,
    ) -> (Arc<Agent>, tokio::sync::mpsc::UnboundedReceiver<Value>) {
        let script_path = dir.path().join("script.toml");
        std::fs::write(&script_path, script).unwrap();
        let mut config = config;
        config.provider.script = Some(script_path);
        let clock = steward_engine::clock::SystemClock::shared();
        // The data directory apart from the sessions' directories (Steward's own
        // files ask every time).
        let data = dir.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        let database = data.join("steward.db");
        let (out, received) = tokio::sync::mpsc::unbounded_channel();
        let outbox = Outbox::new(out, Arc::default());
        let (views, forwarding) = Views::new(outbox.clone());
        let engine = Engine::start(EngineOptions {
            db: Db::open(&database, clock.as_ref()).unwrap(),
            owners_dir: data.join("owners"),
            clock,
            provider: steward_engine::provider::from_config(&config.provider).unwrap(),
            config,
            tools: ToolRegistry::standard(),
            permission: if ask {
                Arc::new(ClientPermission {
                    outbox: outbox.clone(),
                    views: views.clone(),
                })
            } else {
                Arc::new(Headless { allow_all: true })
            },
        })
        .await
        .unwrap();
        let engine = Arc::new(engine);
        tokio::spawn(super::super::views::forward(
            views.clone(),
            engine.clone(),
            engine.subscribe(),
            forwarding,
        ));
        let (_done, shut_down) = tokio::sync::watch::channel(false);
        let agent = Agent {
            engine,
            outbox,
            views,
            shut_down,
            database,
            owners: data.join("owners"),
            reader: Arc::default(),
        };
        (Arc::new(agent), received)
    }

    async fn new_session(agent: &Agent, dir: &tempfile::TempDir) -> String {
        let work = dir.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        let created = agent
            .call("session/new", json!({"cwd": work, "mcpServers": []}))
            .await
            .unwrap();
        created["sessionId"].as_str().unwrap().to_string()
    }

    fn prompt(session: &str, text: &str) -> Value {
        json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]})
    }

    /// Every `session/update` received so far, as (kind, text or status).
    fn received(
        updates: &mut tokio::sync::mpsc::UnboundedReceiver<Value>,
    ) -> Vec<(String, String)> {
        let mut out = Vec::new();
        while let Ok(message) = updates.try_recv() {
            if message["method"] != "session/update" {
                continue;
            }
            let update = &message["params"]["update"];
            let detail = update["content"]["text"]
                .as_str()
                .or(update["status"].as_str())
                .unwrap_or_default();
            out.push((
                update["sessionUpdate"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                detail.to_string(),
            ));
        }
        out
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_step_limit_answers_max_turn_requests() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config::default();
        config.agent.max_steps = 2;
        let script = "[[step]]\ntool_calls = [{ tool = \"list_dir\", input = { path = \".\" } }]\n";
        let (agent, _updates) = agent(&dir, script, config).await;
        let session = new_session(&agent, &dir).await;
        let answer = agent
            .call("session/prompt", prompt(&session, "loop"))
            .await
            .unwrap();
        assert_eq!(answer["stopReason"], "max_turn_requests");
        agent.engine.shutdown().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cancel_racing_the_end_of_a_turn_answers_one_or_the_other_and_keeps_the_transcript_valid()
     {
        for delay in [0u64, 1, 3, 10] {
            let dir = tempfile::tempdir().unwrap();
            let script = "[[step]]\ntext = [\"a \", \"b \", \"c\"]\ndelay_ms = 2\n";
            let (agent, _updates) = agent(&dir, script, Config::default()).await;
            let session = new_session(&agent, &dir).await;
            let prompting = {
                let (agent, session) = (agent.clone(), session.clone());
                tokio::spawn(
                    async move { agent.call("session/prompt", prompt(&session, "go")).await },
                )
            };
            tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
            agent.notify("session/cancel", json!({"sessionId": session}));
            let answer = prompting.await.unwrap().unwrap();
            let stop = answer["stopReason"].as_str().unwrap().to_string();
            assert!(stop == "end_turn" || stop == "cancelled", "{stop}");
            let report = agent
                .engine
                .db()
                .read(|c| steward_engine::doctor::check(c, i64::MAX / 2))
                .await
                .unwrap();
            assert!(report.ok, "delay {delay}: {report:?}");
            agent.engine.shutdown().await.unwrap();
        }
    }

    /// A script whose one step streams slowly (about two seconds).
    const SLOW: &str = "[[step]]\ntext = [\"a \", \"b \", \"c \", \"d \", \"e \", \"f \", \"g \", \"h\"]\ndelay_ms = 250\n";

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cancel_sent_right_behind_its_prompt_cancels_the_turn() {
        let dir = tempfile::tempdir().unwrap();
        let (agent, _updates) = agent(&dir, SLOW, Config::default()).await;
        let session = new_session(&agent, &dir).await;
        // In arrival order: the prompt is accepted, then the cancel, before the
        // prompt's task has run at all.
        let accepted = agent
            .accept("session/prompt", prompt(&session, "go"))
            .unwrap();
        agent.notify("session/cancel", json!({"sessionId": session}));
        let started = std::time::Instant::now();
        let answer = agent.handle(accepted).await.0.unwrap();
        assert_eq!(answer["stopReason"], "cancelled");
        assert!(started.elapsed() < std::time::Duration::from_millis(1500));
        agent.engine.shutdown().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_second_prompt_while_one_runs_is_refused_and_each_update_is_sent_once() {
        let dir = tempfile::tempdir().unwrap();
        let script = "[[step]]\ntext = [\"one \", \"two \", \"three\"]\ndelay_ms = 100\n";
        let (agent, mut updates) = agent(&dir, script, Config::default()).await;
        let session = new_session(&agent, &dir).await;
        let first = agent
            .accept("session/prompt", prompt(&session, "go"))
            .unwrap();
        let refused = agent
            .accept("session/prompt", prompt(&session, "again"))
            .unwrap_err();
        assert_eq!(refused.0, INVALID_REQUEST, "{refused:?}");
        let answer = agent.handle(first).await.0.unwrap();
        assert_eq!(answer["stopReason"], "end_turn");
        let texts: Vec<String> = received(&mut updates)
            .into_iter()
            .filter(|(kind, _)| kind == "agent_message_chunk")
            .map(|(_, text)| text)
            .collect();
        assert_eq!(texts.concat(), "one two three");
        // The turn is over: the next prompt is taken.
        let answer = agent
            .call("session/prompt", prompt(&session, "again"))
            .await
            .unwrap();
        assert_eq!(answer["stopReason"], "end_turn");
        agent.engine.shutdown().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_prompt_for_a_session_not_opened_here_is_not_found() {
        let dir = tempfile::tempdir().unwrap();
        let (agent, _updates) = agent(&dir, SLOW, Config::default()).await;
        for id in ["ses_nope", ""] {
            let refused = agent
                .call("session/prompt", prompt(id, "go"))
                .await
                .unwrap_err();
            assert_eq!(refused.0, RESOURCE_NOT_FOUND, "{refused:?}");
        }
        agent.engine.shutdown().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_cwd_filter_matches_the_directory_however_it_is_spelled() {
        let dir = tempfile::tempdir().unwrap();
        let (agent, _updates) = agent(&dir, SLOW, Config::default()).await;
        let real = dir.path().join("real");
        std::fs::create_dir_all(&real).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let created = agent
            .call("session/new", json!({"cwd": link, "mcpServers": []}))
            .await
            .unwrap();
        let other = dir.path().join("other");
        std::fs::create_dir_all(&other).unwrap();
        agent
            .call("session/new", json!({"cwd": other, "mcpServers": []}))
            .await
            .unwrap();
        let spellings = [
            link.display().to_string(),
            format!("{}/", link.display()),
            real.display().to_string(),
            format!("{}/.", real.display()),
        ];
        for cwd in spellings {
            let listed = agent
                .call("session/list", json!({"cwd": cwd}))
                .await
                .unwrap();
            let ids: Vec<&str> = listed["sessions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["sessionId"].as_str().unwrap())
                .collect();
            assert_eq!(ids, vec![created["sessionId"].as_str().unwrap()], "{cwd}");
        }
        for bad in [json!({"cwd": "relative/dir"}), json!({"cursor": "zzzz"})] {
            let refused = agent.call("session/list", bad.clone()).await.unwrap_err();
            assert_eq!(refused.0, INVALID_PARAMS, "{bad}");
        }
        agent.engine.shutdown().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_client_hears_of_a_tool_call_before_it_is_asked_and_always_is_per_session() {
        let dir = tempfile::tempdir().unwrap();
        let script = "[[step]]\ntool_calls = [{ tool = \"write_file\", input = { path = \"a.txt\", content = \"x\" } }]\n\
                      [[step]]\ntext = [\"done\"]\n\
                      [[step]]\ntool_calls = [{ tool = \"write_file\", input = { path = \"b.txt\", content = \"y\" } }]\n\
                      [[step]]\ntext = [\"done\"]\n\
                      [[step]]\ntool_calls = [{ tool = \"write_file\", input = { path = \"c.txt\", content = \"z\" } }]\n\
                      [[step]]\ntext = [\"done\"]\n";
        let (agent, mut out) = agent_asking(&dir, script, Config::default(), true).await;
        // The client: answers every permission question with `allow_always`, and
        // records what it was sent, in order.
        let seen = Arc::new(std::sync::Mutex::new(Vec::<Value>::new()));
        let client = {
            let (agent, seen) = (agent.clone(), seen.clone());
            tokio::spawn(async move {
                while let Some(message) = out.recv().await {
                    if message["method"] == "session/request_permission" {
                        agent.outbox.answer(
                            &message["id"],
                            Ok(json!({"outcome": {"outcome": "selected", "optionId": "allow_always"}})),
                        );
                    }
                    seen.lock().unwrap().push(message);
                }
            })
        };
        let first = new_session(&agent, &dir).await;
        for _ in 0..2 {
            let answer = agent
                .call("session/prompt", prompt(&first, "write"))
                .await
                .unwrap();
            assert_eq!(answer["stopReason"], "end_turn");
        }
        let second_dir = dir.path().join("second");
        std::fs::create_dir_all(&second_dir).unwrap();
        let second = agent
            .call("session/new", json!({"cwd": second_dir, "mcpServers": []}))
            .await
            .unwrap()["sessionId"]
            .as_str()
            .unwrap()
            .to_string();
        let answer = agent
            .call("session/prompt", prompt(&second, "write"))
            .await
            .unwrap();
        assert_eq!(answer["stopReason"], "end_turn");
        agent.engine.shutdown().await.unwrap();
        drop(agent);
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), client).await;
        let seen = seen.lock().unwrap();
        let asked: Vec<&Value> = seen
            .iter()
            .filter(|m| m["method"] == "session/request_permission")
            .collect();
        // Asked once in the first session (then "always"), and again in the second.
        assert_eq!(asked.len(), 2, "{asked:?}");
        assert_eq!(asked[0]["params"]["sessionId"], first.as_str());
        assert_eq!(asked[1]["params"]["sessionId"], second.as_str());
        for question in asked {
            let call = &question["params"]["toolCall"]["toolCallId"];
            let at = |pred: &dyn Fn(&Value) -> bool| seen.iter().position(pred).unwrap();
            let told = at(&|m| {
                m["params"]["update"]["sessionUpdate"] == "tool_call"
                    && m["params"]["update"]["toolCallId"] == *call
            });
            let asked_at = at(&|m| {
                m["method"] == "session/request_permission"
                    && m["params"]["toolCall"]["toolCallId"] == *call
            });
            assert!(told < asked_at, "asked about {call} before the tool_call");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cancel_behind_a_prompt_queued_to_a_running_execution_cancels_the_prompt_too() {
        let dir = tempfile::tempdir().unwrap();
        let (agent, _updates) = agent(&dir, SLOW, Config::default()).await;
        let session = new_session(&agent, &dir).await;
        // Something already runs the session (as a continuation after a restart
        // does), then the client prompts and cancels at once.
        agent.engine.submit(&session, "earlier").await.unwrap();
        let accepted = agent
            .accept("session/prompt", prompt(&session, "now"))
            .unwrap();
        agent.notify("session/cancel", json!({"sessionId": session}));
        let started = std::time::Instant::now();
        let answer = agent.handle(accepted).await.0.unwrap();
        assert_eq!(answer["stopReason"], "cancelled");
        assert!(started.elapsed() < std::time::Duration::from_millis(1500));
        // The queued prompt never got an answer of its own.
        let messages = agent
            .engine
            .db()
            .read({
                let session = session.clone();
                move |c| steward_engine::store::rows::messages(c, &session)
            })
            .await
            .unwrap();
        let after_prompt: Vec<_> = messages
            .iter()
            .skip_while(|m| !matches!(&m.data, steward_engine::message::MessageData::User(u) if u.text == "now"))
            .filter_map(|m| m.data.as_assistant())
            .collect();
        assert!(
            after_prompt
                .iter()
                .all(|a| a.finish.is_none_or(|f| f.as_str() == "error")),
            "{after_prompt:?}"
        );
        agent.engine.shutdown().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_second_turn_starts_its_text_without_a_paragraph_break() {
        let dir = tempfile::tempdir().unwrap();
        let script = "[[step]]\ntext = [\"first\"]\n[[step]]\ntext = [\"second\"]\n";
        let (agent, mut updates) = agent(&dir, script, Config::default()).await;
        let session = new_session(&agent, &dir).await;
        for text in ["one", "two"] {
            agent
                .call("session/prompt", prompt(&session, text))
                .await
                .unwrap();
        }
        let texts: Vec<String> = received(&mut updates)
            .into_iter()
            .filter(|(kind, _)| kind == "agent_message_chunk")
            .map(|(_, text)| text)
            .collect();
        assert_eq!(texts, vec!["first", "second"]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_call_outside_the_session_directory_is_never_offered_always() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside.txt");
        std::fs::write(&outside, "x").unwrap();
        let script = format!(
            "[[step]]\ntool_calls = [{{ tool = \"read_file\", input = {{ path = {:?} }} }}]\n[[step]]\ntext = [\"done\"]\n",
            outside.display().to_string()
        );
        let (agent, mut out) = agent_asking(&dir, &script, Config::default(), true).await;
        let session = new_session(&agent, &dir).await;
        let asked = {
            let agent = agent.clone();
            tokio::spawn(async move {
                while let Some(message) = out.recv().await {
                    if message["method"] == "session/request_permission" {
                        agent.outbox.answer(
                            &message["id"],
                            Ok(json!({"outcome": {"outcome": "selected", "optionId": "allow_once"}})),
                        );
                        return message;
                    }
                }
                Value::Null
            })
        };
        let answer = agent
            .call("session/prompt", prompt(&session, "read it"))
            .await
            .unwrap();
        assert_eq!(answer["stopReason"], "end_turn");
        let question = asked.await.unwrap();
        let options: Vec<&str> = question["params"]["options"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["optionId"].as_str().unwrap())
            .collect();
        assert_eq!(options, vec!["allow_once", "reject_once"]);
        agent.engine.shutdown().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn unknown_methods_and_bad_params_get_their_error_codes() {
        let dir = tempfile::tempdir().unwrap();
        let (agent, _updates) = agent(&dir, "[[step]]\ntext = [\"x\"]\n", Config::default()).await;
        assert_eq!(
            agent.call("session/fly", json!({})).await.unwrap_err().0,
            METHOD_NOT_FOUND
        );
        assert_eq!(
            agent
                .call("session/new", json!({"cwd": 5}))
                .await
                .unwrap_err()
                .0,
            INVALID_PARAMS
        );
        assert_eq!(
            agent
                .call(
                    "session/load",
                    json!({"sessionId": "ses_nope", "cwd": "/", "mcpServers": []})
                )
                .await
                .unwrap_err()
                .0,
            RESOURCE_NOT_FOUND
        );
        agent.engine.shutdown().await.unwrap();
    }
}
