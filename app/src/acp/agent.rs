//! The ACP methods over the engine: `initialize`, `session/new`, `session/load`,
//! `session/list`, `session/prompt`, `session/cancel`, and the permission questions
//! the engine asks through `session/request_permission`.

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use agent_client_protocol_schema::ProtocolVersion;
use agent_client_protocol_schema::v1::{
    AgentCapabilities, CancelNotification, ContentBlock, Implementation, InitializeRequest,
    InitializeResponse, ListSessionsRequest, ListSessionsResponse, LoadSessionRequest,
    LoadSessionResponse, NewSessionRequest, NewSessionResponse, PermissionOption,
    PermissionOptionKind, PromptRequest, PromptResponse, RequestPermissionOutcome,
    RequestPermissionRequest, RequestPermissionResponse, SessionCapabilities, SessionInfo,
    SessionListCapabilities, SessionNotification, SessionUpdate, StopReason, ToolCallStatus,
    ToolCallUpdate, ToolCallUpdateFields,
};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use steward_engine::coordinator::SessionOutcome;
use steward_engine::inspect::pages::PageRequest;
use steward_engine::runner::{EngineEvent, Outcome};
use steward_engine::store::rows;
use steward_engine::tools::{BoxFuture, Decision, Permission, PermissionRequest};
use steward_engine::{Engine, Error};
use tokio::sync::broadcast::error::RecvError;

use super::transport::{
    INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND, Outbox, RESOURCE_NOT_FOUND,
};
use super::updates;

/// A JSON-RPC error: code and message.
pub type Failure = (i64, String);

/// Sessions listed per page.
const LIST_PAGE: usize = 100;

/// What the methods share.
#[derive(Debug)]
pub struct Agent {
    pub engine: Engine,
    pub outbox: Outbox,
    pub database: PathBuf,
    pub owners: PathBuf,
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

impl Agent {
    /// Answers one request.
    pub async fn handle(&self, method: &str, p: Value) -> Result<Value, Failure> {
        match method {
            "initialize" => self.initialize(params(p)?),
            "session/new" => self.new_session(params(p)?).await,
            "session/load" => self.load(params(p)?).await,
            "session/list" => self.list(params(p)?).await,
            "session/prompt" => self.prompt(params(p)?).await,
            other => Err((METHOD_NOT_FOUND, format!("method not found: {other}"))),
        }
    }

    /// Takes one notification (unknown ones are ignored, as JSON-RPC says).
    pub fn notify(&self, method: &str, p: Value) {
        if method == "session/cancel" {
            match params::<CancelNotification>(p) {
                Ok(cancel) => {
                    self.engine.cancel(&cancel.session_id.0);
                }
                Err((_, e)) => tracing::warn!(error = %e, "a bad session/cancel"),
            }
        }
    }

    fn initialize(&self, _request: InitializeRequest) -> Result<Value, Failure> {
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
        to_value(NewSessionResponse::new(session.id))
    }

    async fn load(&self, request: LoadSessionRequest) -> Result<Value, Failure> {
        let id = request.session_id.0.to_string();
        let messages = self
            .engine
            .db()
            .read({
                let id = id.clone();
                move |conn| {
                    if rows::session(conn, &id)?.is_none() {
                        return Err(Error::NotFound {
                            kind: "session",
                            id,
                        });
                    }
                    rows::messages(conn, &id)
                }
            })
            .await
            .map_err(engine_failure)?;
        for update in updates::replay(&messages) {
            self.update(&id, update);
        }
        to_value(LoadSessionResponse::new())
    }

    async fn list(&self, request: ListSessionsRequest) -> Result<Value, Failure> {
        let cwd = request.cwd.map(|c| c.to_string_lossy().into_owned());
        let mut page = PageRequest {
            after: request.cursor,
            ..PageRequest::first(LIST_PAGE)
        };
        let (database, owners) = (self.database.clone(), self.owners.clone());
        let now = steward_engine::clock::SystemClock::new();
        let mut sessions = Vec::new();
        // With a cwd filter, keep reading pages until one is full or none are left.
        let mut reader =
            steward_engine::inspect::Reader::open(&database, &owners).map_err(engine_failure)?;
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

    /// Runs a turn: the prompt is admitted (with the session's claim, in one
    /// transaction), its updates streamed, and the answer says how it ended.
    async fn prompt(&self, request: PromptRequest) -> Result<Value, Failure> {
        let session = request.session_id.0.to_string();
        let text = prompt_text(&request.prompt)?;
        let mut events = self.engine.subscribe();
        let before = self
            .engine
            .db()
            .read({
                let session = session.clone();
                move |conn| {
                    Ok(rows::messages_before(conn, &session, None, 1)?
                        .last()
                        .map(|m| m.seq)
                        .unwrap_or(-1))
                }
            })
            .await
            .map_err(engine_failure)?;
        self.engine
            .submit(&session, &text)
            .await
            .map_err(engine_failure)?;
        let mut tools: HashMap<String, ToolCallStatus> = HashMap::new();
        let outcome = {
            let idle = self.engine.wait_idle(&session);
            tokio::pin!(idle);
            loop {
                tokio::select! {
                    outcome = &mut idle => break outcome,
                    event = events.recv() => self.forward(&session, event, &mut tools),
                }
            }
        };
        while let Ok(event) = events.try_recv() {
            self.forward(&session, Ok(event), &mut tools);
        }
        // What a cancellation or a failure closed without an event of its own.
        let turn = self
            .engine
            .db()
            .read({
                let session = session.clone();
                move |conn| {
                    let all = rows::messages(conn, &session)?;
                    Ok(all
                        .into_iter()
                        .filter(|m| m.seq > before)
                        .collect::<Vec<_>>())
                }
            })
            .await
            .map_err(engine_failure)?;
        for update in updates::settle(&turn, &mut tools) {
            self.update(&session, update);
        }
        let stop = match outcome {
            Some(SessionOutcome::Ran(Outcome::Idle)) | None => {
                if turn_hit_a_limit(&turn, "length") {
                    StopReason::MaxTokens
                } else {
                    StopReason::EndTurn
                }
            }
            Some(SessionOutcome::Ran(Outcome::Cancelled)) => StopReason::Cancelled,
            Some(SessionOutcome::Ran(Outcome::Failed(_))) if turn_hit_a_limit(&turn, "limit") => {
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
            Some(other) => {
                return Err((
                    INTERNAL_ERROR,
                    format!("the turn did not complete: {other:?}"),
                ));
            }
        };
        to_value(PromptResponse::new(stop))
    }

    fn forward(
        &self,
        session: &str,
        event: Result<EngineEvent, RecvError>,
        tools: &mut HashMap<String, ToolCallStatus>,
    ) {
        match event {
            Ok(EngineEvent::Committed(record)) if record.session_id == session => {
                for update in updates::from_event(&record.event, tools) {
                    self.update(session, update);
                }
            }
            Ok(_) => {}
            Err(RecvError::Lagged(n)) => {
                tracing::warn!(
                    missed = n,
                    "session updates lagged; the turn's end settles tools"
                );
            }
            Err(RecvError::Closed) => {}
        }
    }

    fn update(&self, session: &str, update: SessionUpdate) {
        match serde_json::to_value(SessionNotification::new(session.to_string(), update)) {
            Ok(params) => self.outbox.notify("session/update", params),
            Err(e) => tracing::error!(error = %e, "cannot serialize an update"),
        }
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
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Tool permission through the client: `session/request_permission` with allow
/// once, allow always (for the rest of this process) and reject. A cancelled
/// request, or a closed connection, denies.
#[derive(Debug, Clone)]
pub struct ClientPermission {
    pub outbox: Outbox,
    pub always: Arc<Mutex<BTreeSet<String>>>,
}

impl Permission for ClientPermission {
    fn decide(&self, request: PermissionRequest) -> BoxFuture<Decision> {
        let remembered = request.outside.is_none()
            && self
                .always
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(&request.tool);
        let (outbox, always) = (self.outbox.clone(), self.always.clone());
        Box::pin(async move {
            if remembered {
                return Decision::Allow;
            }
            let mut fields = ToolCallUpdateFields::new()
                .title(updates::title(&request.tool, &request.input))
                .kind(updates::kind(&request.tool))
                .status(ToolCallStatus::Pending)
                .raw_input(request.input.clone());
            if let Some(path) = &request.outside {
                fields = fields.content(vec![
                    agent_client_protocol_schema::v1::ToolCallContent::from(format!(
                        "It reaches outside the session directory: {}",
                        path.display()
                    )),
                ]);
            }
            let ask = RequestPermissionRequest::new(
                request.session_id.clone(),
                ToolCallUpdate::new(request.call_id.clone(), fields),
                vec![
                    PermissionOption::new(
                        "allow_once",
                        "Allow once",
                        PermissionOptionKind::AllowOnce,
                    ),
                    PermissionOption::new(
                        "allow_always",
                        format!("Always allow {}", request.tool),
                        PermissionOptionKind::AllowAlways,
                    ),
                    PermissionOption::new(
                        "reject_once",
                        "Reject",
                        PermissionOptionKind::RejectOnce,
                    ),
                ],
            );
            let Ok(params) = serde_json::to_value(ask) else {
                return Decision::Deny("Permission denied: the request could not be sent".into());
            };
            let denied = |why: &str| Decision::Deny(format!("Permission denied: {why}"));
            match outbox.request("session/request_permission", params).await {
                Some(Ok(answer)) => {
                    match serde_json::from_value::<RequestPermissionResponse>(answer) {
                        Ok(response) => match response.outcome {
                            RequestPermissionOutcome::Selected(selected) => {
                                match &*selected.option_id.0 {
                                    "allow_once" => Decision::Allow,
                                    "allow_always" => {
                                        if request.outside.is_none() {
                                            always
                                                .lock()
                                                .unwrap_or_else(|e| e.into_inner())
                                                .insert(request.tool.clone());
                                        }
                                        Decision::Allow
                                    }
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

impl ClientPermission {
    pub fn new(outbox: Outbox) -> ClientPermission {
        ClientPermission {
            outbox,
            always: Arc::new(Mutex::new(BTreeSet::new())),
        }
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
    use crate::acp::transport::Outbox;
    use steward_engine::EngineOptions;
    use steward_engine::config::Config;
    use steward_engine::db::Db;
    use steward_engine::tools::{Headless, ToolRegistry};

    async fn agent(
        dir: &tempfile::TempDir,
        script: &str,
        config: Config,
    ) -> (Agent, tokio::sync::mpsc::UnboundedReceiver<Value>) {
        let script_path = dir.path().join("script.toml");
        std::fs::write(&script_path, script).unwrap();
        let mut config = config;
        config.provider.script = Some(script_path);
        let clock = steward_engine::clock::SystemClock::shared();
        let database = dir.path().join("steward.db");
        let engine = Engine::start(EngineOptions {
            db: Db::open(&database, clock.as_ref()).unwrap(),
            owners_dir: dir.path().join("owners"),
            clock,
            provider: steward_engine::provider::from_config(&config.provider).unwrap(),
            config,
            tools: ToolRegistry::standard(),
            permission: Arc::new(Headless { allow_all: true }),
        })
        .await
        .unwrap();
        let (out, received) = tokio::sync::mpsc::unbounded_channel();
        let agent = Agent {
            engine,
            outbox: Outbox::new(out),
            database,
            owners: dir.path().join("owners"),
        };
        (agent, received)
    }

    async fn new_session(agent: &Agent, dir: &tempfile::TempDir) -> String {
        let work = dir.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        let created = agent
            .handle("session/new", json!({"cwd": work, "mcpServers": []}))
            .await
            .unwrap();
        created["sessionId"].as_str().unwrap().to_string()
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
            .handle(
                "session/prompt",
                json!({"sessionId": session, "prompt": [{"type": "text", "text": "loop"}]}),
            )
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
            let agent = Arc::new(agent);
            let prompting = {
                let (agent, session) = (agent.clone(), session.clone());
                tokio::spawn(async move {
                    agent
                        .handle(
                            "session/prompt",
                            json!({"sessionId": session, "prompt": [{"type": "text", "text": "go"}]}),
                        )
                        .await
                })
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

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn unknown_methods_and_bad_params_get_their_error_codes() {
        let dir = tempfile::tempdir().unwrap();
        let (agent, _updates) = agent(&dir, "[[step]]\ntext = [\"x\"]\n", Config::default()).await;
        assert_eq!(
            agent.handle("session/fly", json!({})).await.unwrap_err().0,
            METHOD_NOT_FOUND
        );
        assert_eq!(
            agent
                .handle("session/new", json!({"cwd": 5}))
                .await
                .unwrap_err()
                .0,
            INVALID_PARAMS
        );
        assert_eq!(
            agent
                .handle(
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
