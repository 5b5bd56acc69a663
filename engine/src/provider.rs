//! Providers: the LLMs that answer a step. A trait with four implementations —
//! `scripted` (built in, offline, deterministic), `openai` (any OpenAI-compatible
//! chat-completions server), `anthropic` (the Messages API, which Ollama and
//! llama.cpp's server also speak) and `ollama` (Ollama's native chat API) — and
//! fakes in tests. Each is written by hand on reqwest, so that nothing is sent
//! before the runner's dispatch boundary (protocol §4.5).
//!
//! A provider is handed one [`ProviderRequest`] right after the runner's dispatch
//! boundary and streams [`ProviderEvent`]s back. It never retries on its own: a
//! retryable failure before any output goes back to the runner, which passes the
//! fence again before sending anew.

#[doc(hidden)]
pub mod anthropic;
pub mod context;
#[cfg(test)]
pub(crate) mod fake;
pub mod http;
pub mod limits;
pub mod ollama;
pub mod openai;
pub mod scripted;

use std::fmt;
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::config::ProviderConfig;
use crate::message::{Finish, Reasoning, Usage};

/// One message of a provider conversation.
#[derive(Debug, Clone, PartialEq)]
pub enum ChatMessage {
    System(String),
    User(String),
    Assistant {
        text: String,
        tool_calls: Vec<ToolCall>,
        /// The step's reasoning blocks, sent back where the API requires them.
        reasoning: Vec<Reasoning>,
    },
    ToolResult {
        call_id: String,
        /// The tool's name (Ollama's native API names results by tool).
        tool: String,
        content: String,
        /// The call failed (recovery's "outcome unknown" included).
        is_error: bool,
    },
}

/// A tool call requested by the model.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub call_id: String,
    pub tool: String,
    /// Parsed arguments, or the raw text when they are not valid JSON.
    pub input: Value,
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments.
    pub parameters: Value,
}

/// Why the request is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// An agent step.
    Step,
    /// A summary of the conversation so far (compaction).
    Compaction,
}

/// Everything a provider needs for one request.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderRequest {
    pub session_id: String,
    pub purpose: Purpose,
    /// How many assistant messages the session had before this step.
    pub step_index: usize,
    pub messages: Vec<ChatMessage>,
    pub tools: Vec<ToolSpec>,
}

/// What comes back, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum ProviderEvent {
    TextDelta(String),
    /// One whole block of reasoning (with its signature).
    Reasoning(Reasoning),
    ToolCall(ToolCall),
    Usage(Usage),
    /// Something the answer suggests went wrong without failing the step (a
    /// prompt cut at the model's context window).
    Warning(String),
    Finish(Finish),
}

/// What kind of failure a provider reported (protocol §4.18).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// Too many requests (HTTP 429, `rate_limit_error`).
    RateLimited,
    /// The provider is overloaded (HTTP 529 or 503, `overloaded_error`).
    Overloaded,
    /// The conversation does not fit the model's context window.
    ContextTooLong,
    /// The API key was refused (HTTP 401, 403).
    Authentication,
    Other,
}

impl ErrorKind {
    /// The stored name (`MessageError.reason`).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::RateLimited => "rate_limited",
            ErrorKind::Overloaded => "overloaded",
            ErrorKind::ContextTooLong => "context_too_long",
            ErrorKind::Authentication => "authentication",
            ErrorKind::Other => "other",
        }
    }
}

/// A failed request or stream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ProviderError {
    /// Before any output, the runner may try again (after `retry_after`, or its own
    /// backoff).
    pub retryable: bool,
    pub kind: ErrorKind,
    /// How long the provider asked to wait before trying again.
    pub retry_after: Option<std::time::Duration>,
    pub message: String,
}

impl ProviderError {
    /// A failure that trying again will not fix.
    pub fn fatal(message: impl Into<String>) -> ProviderError {
        ProviderError {
            retryable: false,
            kind: ErrorKind::Other,
            retry_after: None,
            message: message.into(),
        }
    }

    /// A failure before any output (429, 5xx, a refused connection): the runner tries again.
    pub fn retryable(message: impl Into<String>) -> ProviderError {
        ProviderError {
            retryable: true,
            ..ProviderError::fatal(message)
        }
    }

    /// The same error, of `kind`.
    pub fn of_kind(mut self, kind: ErrorKind) -> ProviderError {
        self.kind = kind;
        self
    }
}

/// The answer to one request. Dropping it stops the request.
#[derive(Debug)]
pub struct ProviderStream {
    events: mpsc::Receiver<Result<ProviderEvent, ProviderError>>,
    task: Option<JoinHandle<()>>,
}

impl ProviderStream {
    /// A stream fed by `produce`, which runs as its own task until it returns or the
    /// stream is dropped.
    pub fn spawn<F>(produce: impl FnOnce(StreamSender) -> F) -> ProviderStream
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let (tx, rx) = mpsc::channel(64);
        let task = tokio::spawn(produce(StreamSender(tx)));
        ProviderStream {
            events: rx,
            task: Some(task),
        }
    }

    /// The next event; `None` when the provider is done.
    pub async fn next(&mut self) -> Option<Result<ProviderEvent, ProviderError>> {
        self.events.recv().await
    }
}

impl Drop for ProviderStream {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// The producing half of a [`ProviderStream`].
#[derive(Debug, Clone)]
pub struct StreamSender(mpsc::Sender<Result<ProviderEvent, ProviderError>>);

impl StreamSender {
    /// Sends one item; false when the consumer is gone.
    pub async fn send(&self, item: Result<ProviderEvent, ProviderError>) -> bool {
        self.0.send(item).await.is_ok()
    }
}

/// A model behind a request/stream interface.
pub trait Provider: Send + Sync + fmt::Debug {
    /// The provider's name (`scripted`, `openai`), recorded on every assistant.
    fn name(&self) -> &str;
    /// The model answering.
    fn model(&self) -> &str;
    /// Sends `request`. Called right after the dispatch boundary, with no other await
    /// in between; the request is under way when this returns.
    fn stream(&self, request: ProviderRequest) -> ProviderStream;
    /// This provider answering with `model` instead, when it can (a session keeps
    /// its model, protocol §4.17); `None` when it cannot serve that model (the
    /// scripted provider serves only its own script).
    fn with_model(&self, model: &str) -> Option<Arc<dyn Provider>>;
}

/// The provider named by the config: `scripted`, `openai`, `anthropic` or `ollama`.
pub fn from_config(config: &ProviderConfig) -> Result<Arc<dyn Provider>, String> {
    match config.name.as_str() {
        "scripted" => {
            let script = match &config.script {
                Some(path) => scripted::Script::load(path)?,
                None => scripted::Script::demo(),
            };
            // A script is its model: a session begun on one is never continued on
            // another (the built-in demo is `demo`).
            let model = config.model.clone().unwrap_or_else(|| {
                config
                    .script
                    .as_deref()
                    .and_then(|p| p.file_stem())
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_else(|| "demo".into())
            });
            Ok(Arc::new(scripted::ScriptedProvider::new(script, model)))
        }
        "openai" => Ok(Arc::new(openai::OpenAiProvider::new(config)?)),
        "anthropic" => Ok(Arc::new(anthropic::AnthropicProvider::new(config)?)),
        "ollama" => Ok(Arc::new(ollama::OllamaProvider::new(config)?)),
        other => Err(format!(
            "unknown provider `{other}`: use `scripted`, `openai`, `anthropic` or `ollama`"
        )),
    }
}
