//! Providers: the LLMs that answer a step. A trait with two implementations —
//! `scripted` (built in, offline, deterministic) and `openai` (any OpenAI-compatible
//! chat-completions server) — and fakes in tests.
//!
//! A provider is handed one [`ProviderRequest`] right after the runner's dispatch
//! boundary and streams [`ProviderEvent`]s back. It never retries on its own: a
//! retryable failure before any output goes back to the runner, which passes the
//! fence again before sending anew.

#[doc(hidden)]
pub mod context;
pub mod limits;
pub mod openai;
pub mod scripted;

use std::fmt;
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::config::ProviderConfig;
use crate::message::{Finish, Usage};

/// One message of a provider conversation.
#[derive(Debug, Clone, PartialEq)]
pub enum ChatMessage {
    System(String),
    User(String),
    Assistant {
        text: String,
        tool_calls: Vec<ToolCall>,
    },
    ToolResult {
        call_id: String,
        content: String,
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
    ToolCall(ToolCall),
    Usage(Usage),
    Finish(Finish),
}

/// A failed request or stream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ProviderError {
    /// 429 or 5xx before any output: the runner may try again after a backoff.
    pub retryable: bool,
    pub message: String,
}

impl ProviderError {
    /// A failure that trying again will not fix.
    pub fn fatal(message: impl Into<String>) -> ProviderError {
        ProviderError {
            retryable: false,
            message: message.into(),
        }
    }

    /// A failure before any output (429, 5xx, a refused connection): the runner tries again.
    pub fn retryable(message: impl Into<String>) -> ProviderError {
        ProviderError {
            retryable: true,
            message: message.into(),
        }
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
}

/// The provider named by the config: `scripted` or `openai`.
pub fn from_config(config: &ProviderConfig) -> Result<Arc<dyn Provider>, String> {
    match config.name.as_str() {
        "scripted" => {
            let script = match &config.script {
                Some(path) => scripted::Script::load(path)?,
                None => scripted::Script::demo(),
            };
            Ok(Arc::new(scripted::ScriptedProvider::new(
                script,
                config.model.clone().unwrap_or_else(|| "demo".into()),
            )))
        }
        "openai" => Ok(Arc::new(openai::OpenAiProvider::new(config)?)),
        other => Err(format!(
            "unknown provider `{other}`: use `scripted` or `openai`"
        )),
    }
}
