//! The ACP methods over the engine: `initialize`, `session/new`, `session/load`,
//! `session/list`, `session/prompt`, `session/cancel`, and the permission questions
//! the engine asks through `session/request_permission`. Requests are read and
//! accepted here, in the order they arrive; each kind is answered in a file of its
//! own: `sessions` (new, load, list), `prompt`, `permission`.

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
    /// What the client said it does with files (`clientCapabilities.fs`): read and
    /// write text files for Steward.
    pub fs: std::sync::Mutex<(bool, bool)>,
}

/// File tools through the client's editor (`fs/read_text_file`,
/// `fs/write_text_file`), for one session.
#[derive(Debug)]
struct ClientFs {
    outbox: Outbox,
    /// Waited on before a request, so the client hears of the call (its
    /// `in_progress` update) before the call reaches it.
    views: Arc<Views>,
    session: String,
    reads: bool,
    writes: bool,
}

impl steward_engine::tools::ClientFiles for ClientFs {
    fn reads(&self) -> bool {
        self.reads
    }

    fn writes(&self) -> bool {
        self.writes
    }

    fn read(&self, path: &Path) -> BoxFuture<Result<String, String>> {
        let (outbox, views, session, path) = (
            self.outbox.clone(),
            self.views.clone(),
            self.session.clone(),
            path.to_path_buf(),
        );
        Box::pin(async move {
            views.barrier().await;
            let params = json!({"sessionId": session, "path": path});
            match outbox.request("fs/read_text_file", params).await {
                Some(Ok(answer)) => {
                    answer["content"]
                        .as_str()
                        .map(str::to_string)
                        .ok_or_else(|| {
                            format!(
                                "the client's answer to reading {} has no content",
                                path.display()
                            )
                        })
                }
                Some(Err(error)) => Err(format!(
                    "the client could not read {}: {}",
                    path.display(),
                    error
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("an error")
                )),
                None => Err(format!(
                    "the client went away while reading {}",
                    path.display()
                )),
            }
        })
    }

    fn write(&self, path: &Path, content: String) -> BoxFuture<Result<(), String>> {
        let (outbox, views, session, path) = (
            self.outbox.clone(),
            self.views.clone(),
            self.session.clone(),
            path.to_path_buf(),
        );
        Box::pin(async move {
            views.barrier().await;
            let params = json!({"sessionId": session, "path": path, "content": content});
            match outbox.request("fs/write_text_file", params).await {
                Some(Ok(_)) => Ok(()),
                Some(Err(error)) => Err(format!(
                    "the client could not write {}: {}",
                    path.display(),
                    error
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("an error")
                )),
                None => Err(format!(
                    "the client went away while writing {}: whether it was written is unknown",
                    path.display()
                )),
            }
        })
    }
}

impl Agent {
    /// Lets `session`'s file tools go through the client's editor, when it offers
    /// to read or write files.
    fn offer_files(&self, session: &str) {
        let (reads, writes) = *self.fs.lock().unwrap_or_else(|e| e.into_inner());
        if reads || writes {
            self.engine.set_client_files(
                session,
                Arc::new(ClientFs {
                    outbox: self.outbox.clone(),
                    views: self.views.clone(),
                    session: session.to_string(),
                    reads,
                    writes,
                }),
            );
        }
    }
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

    fn initialize(&self, request: Box<InitializeRequest>) -> Result<Value, Failure> {
        let fs = &request.client_capabilities.fs;
        *self.fs.lock().unwrap_or_else(|e| e.into_inner()) =
            (fs.read_text_file, fs.write_text_file);
        let capabilities = AgentCapabilities::new()
            .load_session(true)
            .prompt_capabilities(
                agent_client_protocol_schema::v1::PromptCapabilities::new().embedded_context(true),
            )
            .mcp_capabilities(agent_client_protocol_schema::v1::McpCapabilities::new().http(true))
            .session_capabilities(SessionCapabilities::new().list(SessionListCapabilities::new()));
        to_value(
            InitializeResponse::new(ProtocolVersion::V1)
                .agent_capabilities(capabilities)
                .agent_info(Implementation::new("steward", env!("CARGO_PKG_VERSION"))),
        )
    }
}

/// `2026-12-01T12:00:00Z` from milliseconds since the epoch (UTC).
fn rfc3339(ms: i64) -> String {
    let c = steward_engine::clock::Civil::of(ms);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        c.year, c.month, c.day, c.hour, c.minute, c.second
    )
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

mod permission;
mod prompt;
mod sessions;
#[cfg(test)]
mod tests;

pub use permission::ClientPermission;
