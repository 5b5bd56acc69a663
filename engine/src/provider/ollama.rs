//! The `ollama` provider: Ollama's native chat API (`POST {base_url}/api/chat`,
//! newline-delimited JSON).
//!
//! Unlike Ollama's OpenAI-compatible `/v1`, it lets Steward set the context window:
//! `options.num_ctx` is always sent — `[provider] num_ctx`, else the model's own
//! context length (`/api/show`, asked once), at least 8192 — so an agent's prompt is
//! never cut at Ollama's default of 4096 tokens without a word. `keep_alive` is
//! passed on. Tool calls arrive whole; `done_reason` and `prompt_eval_count` are
//! read, and a prompt that filled the window is reported (a warning on the step).

use std::sync::Arc;

use serde_json::{Value, json};

use crate::config::ProviderConfig;
use crate::message::{Finish, Reasoning, Usage};
use crate::provider::http::{self, Scrubber};
use crate::provider::limits::{self, Limits};
use crate::provider::{
    ChatMessage, Provider, ProviderError, ProviderEvent, ProviderRequest, ProviderStream,
    StreamSender, ToolCall,
};

/// The smallest context window Steward asks Ollama for: an agent's system prompt,
/// tools and a few turns do not fit in less.
pub const MIN_NUM_CTX: u32 = 8192;

/// Talks to one Ollama server.
#[derive(Clone)]
pub struct OllamaProvider {
    client: reqwest::Client,
    base: String,
    model: String,
    api_key: Option<String>,
    limits: Limits,
    num_ctx: Option<u32>,
    keep_alive: Option<String>,
    /// The context window asked for, once known (from the config or `/api/show`).
    window: Arc<tokio::sync::OnceCell<u32>>,
}

impl std::fmt::Debug for OllamaProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OllamaProvider")
            .field("base", &self.base)
            .field("model", &self.model)
            .field("num_ctx", &self.num_ctx)
            .finish()
    }
}

impl OllamaProvider {
    pub fn new(config: &ProviderConfig) -> Result<OllamaProvider, String> {
        let (api_key, client) = super::http::key_and_client(config)?;
        Ok(OllamaProvider {
            client,
            base: config.base_url(),
            model: config.model.clone().ok_or(
                "provider.model (or --model) is required for `ollama` (e.g. qwen2.5-coder)",
            )?,
            api_key,
            limits: Limits::of(config),
            num_ctx: config.num_ctx,
            keep_alive: config.keep_alive.clone(),
            window: Arc::new(tokio::sync::OnceCell::new()),
        })
    }

    /// The request body for a context window of `num_ctx` tokens.
    pub fn body(&self, request: &ProviderRequest, num_ctx: u32) -> Value {
        let messages: Vec<Value> = request
            .messages
            .iter()
            .map(|m| match m {
                ChatMessage::System(text) => json!({"role": "system", "content": text}),
                ChatMessage::User(text) => json!({"role": "user", "content": text}),
                ChatMessage::Assistant {
                    text,
                    tool_calls,
                    reasoning,
                } => {
                    let mut m = json!({"role": "assistant", "content": text});
                    let thinking: String = reasoning.iter().map(|r| r.text.as_str()).collect();
                    if !thinking.is_empty() {
                        m["thinking"] = json!(thinking);
                    }
                    if !tool_calls.is_empty() {
                        m["tool_calls"] = tool_calls
                            .iter()
                            .map(|c| {
                                let arguments = match &c.input {
                                    Value::Object(_) => c.input.clone(),
                                    _ => json!({}),
                                };
                                json!({"function": {"name": c.tool, "arguments": arguments}})
                            })
                            .collect();
                    }
                    m
                }
                ChatMessage::ToolResult { tool, content, .. } => {
                    json!({"role": "tool", "content": content, "tool_name": tool})
                }
            })
            .collect();
        let mut body = json!({
            "model": self.model,
            "messages": messages,
            "stream": true,
            "options": {"num_ctx": num_ctx},
        });
        if let Some(keep_alive) = &self.keep_alive {
            body["keep_alive"] = json!(keep_alive);
        }
        if !request.tools.is_empty() {
            body["tools"] = request
                .tools
                .iter()
                .map(|t| {
                    json!({"type": "function", "function": {
                        "name": t.name, "description": t.description, "parameters": t.parameters}})
                })
                .collect();
        }
        body
    }

    fn post(&self, path: &str, body: &Value) -> reqwest::RequestBuilder {
        let mut request = self
            .client
            .post(format!("{}{path}", self.base))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string());
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        request
    }

    /// The context window to ask for: the config's, else the model's own context
    /// length (asked once of `/api/show`), at least [`MIN_NUM_CTX`].
    async fn num_ctx(&self) -> u32 {
        if let Some(n) = self.num_ctx {
            return n;
        }
        *self
            .window
            .get_or_init(|| async {
                let shown = self.post("/api/show", &json!({"model": self.model}));
                let context = match shown.send().await {
                    Ok(response) if response.status().is_success() => {
                        let text = limits::error_body(response, 1 << 20).await;
                        context_length(&text)
                    }
                    _ => None,
                };
                context
                    .unwrap_or(0)
                    .max(u64::from(MIN_NUM_CTX))
                    .min(u64::from(u32::MAX)) as u32
            })
            .await
    }
}

/// The model's context length from an `/api/show` answer (`model_info`'s
/// `<architecture>.context_length`).
fn context_length(show: &str) -> Option<u64> {
    let show: Value = serde_json::from_str(show).ok()?;
    show["model_info"]
        .as_object()?
        .iter()
        .find(|(k, _)| k.ends_with(".context_length"))
        .and_then(|(_, v)| v.as_u64())
}

impl Provider for OllamaProvider {
    fn name(&self) -> &str {
        "ollama"
    }

    fn model(&self) -> &str {
        &self.model
    }

    fn stream(&self, request: ProviderRequest) -> ProviderStream {
        let provider = self.clone();
        let estimated = crate::provider::context::estimate_tokens(&request.messages) as u64;
        ProviderStream::spawn(move |tx| async move {
            let num_ctx = provider.num_ctx().await;
            let http = provider.post("/api/chat", &provider.body(&request, num_ctx));
            let mut scrubber = Scrubber::new(provider.api_key.as_deref());
            let window = Window { num_ctx, estimated };
            if let Err(error) = run(http, &tx, &mut scrubber, provider.limits, window).await {
                http::fail(&tx, &mut scrubber, error).await;
            }
        })
    }

    fn with_model(&self, model: &str) -> Option<Arc<dyn Provider>> {
        let mut other = self.clone();
        other.model = model.to_string();
        other.window = Arc::new(tokio::sync::OnceCell::new());
        Some(Arc::new(other))
    }
}

/// The context window a request was sent with, and its prompt's estimated size.
#[derive(Debug, Clone, Copy)]
struct Window {
    num_ctx: u32,
    estimated: u64,
}

impl Window {
    /// A warning when the prompt filled the window: Ollama then cuts its beginning
    /// without a word.
    fn truncated(&self, prompt_eval_count: Option<u64>) -> Option<String> {
        let window = u64::from(self.num_ctx);
        let filled = prompt_eval_count.is_some_and(|n| n + 16 >= window);
        (filled || self.estimated > window).then(|| {
            format!(
                "the prompt (about {} tokens) filled the context window (num_ctx {window}): Ollama cut its beginning; raise `[provider] num_ctx` or let the conversation compact",
                self.estimated.max(prompt_eval_count.unwrap_or(0))
            )
        })
    }

    /// The warning for an answer Ollama stopped at `done_reason: "length"`: with no
    /// `num_predict` set, the context window filled while it answered.
    fn answer_cut(&self) -> String {
        format!(
            "the answer stopped where the context window (num_ctx {}) filled: raise `[provider] num_ctx` or let the conversation compact",
            self.num_ctx
        )
    }
}

/// Streams one answer. The idle bound times whole records (protocol §4.15): bytes
/// that never complete a line, and blank lines, do not count.
async fn run(
    http: reqwest::RequestBuilder,
    tx: &StreamSender,
    scrubber: &mut Scrubber,
    limits: Limits,
    window: Window,
) -> Result<(), ProviderError> {
    let response = http::send(http).await?;
    if !response.status().is_success() {
        return Err(http::refusal(response, limits.error_body_bytes, scrubber.secret()).await);
    }
    let bytes = Box::pin(limits::capped(
        response.bytes_stream(),
        limits.event_bytes,
        true,
    ));
    let mut records = Box::pin(limits::records(bytes));
    let mut idle = limits::Idle::new(limits.idle);
    let mut answered = 0usize;
    let mut calls = 0usize;
    let mut thinking = String::new();
    loop {
        let Some(text) = idle.next(&mut records).await? else {
            return Err(ProviderError::fatal(
                "the provider stream ended before the answer was complete",
            ));
        };
        let text = text?;
        idle.progress();
        let record: Value = serde_json::from_str(&text).map_err(|e| {
            let snippet: String = scrubber.scrub(&text).chars().take(120).collect();
            ProviderError::fatal(format!(
                "the provider sent a malformed line ({e}): {snippet}"
            ))
        })?;
        if let Some(error) = record["error"].as_str() {
            // "server busy" reads as overloaded: retried when nothing streamed yet.
            return Err(http::streamed(None, &scrubber.scrub(error)));
        }
        let message = &record["message"];
        if let Some(more) = message["thinking"].as_str().filter(|t| !t.is_empty()) {
            // Streamed thinking is kept whole, as one block, at the end.
            count_answer(&mut answered, more.len(), &limits)?;
            thinking.push_str(more);
        }
        if let Some(text) = message["content"].as_str().filter(|t| !t.is_empty()) {
            count_answer(&mut answered, text.len(), &limits)?;
            if let Some(text) = scrubber.pass(text)
                && !tx.send(Ok(ProviderEvent::TextDelta(text))).await
            {
                return Ok(());
            }
        }
        for call in message["tool_calls"].as_array().into_iter().flatten() {
            let function = &call["function"];
            let name = scrubber.scrub(function["name"].as_str().unwrap_or(""));
            if name.is_empty() {
                return Err(ProviderError::fatal("a tool call arrived without a name"));
            }
            let arguments = match &function["arguments"] {
                Value::Null => json!({}),
                Value::String(raw) => {
                    serde_json::from_str(raw).unwrap_or(Value::String(raw.clone()))
                }
                other => other.clone(),
            };
            if arguments.to_string().len() > limits.tool_arguments_bytes {
                return Err(Limits::exceeded(
                    "a tool call's arguments",
                    limits.tool_arguments_bytes,
                    "max_tool_arguments_bytes",
                ));
            }
            let call_id = call["id"]
                .as_str()
                .filter(|id| !id.is_empty())
                .map(|id| scrubber.scrub(id))
                .unwrap_or_else(|| format!("call_{calls}"));
            calls += 1;
            if !tx
                .send(Ok(ProviderEvent::ToolCall(ToolCall {
                    call_id,
                    tool: name,
                    input: scrubber.scrub_value(arguments),
                })))
                .await
            {
                return Ok(());
            }
        }
        if record["done"].as_bool() == Some(true) {
            if let Some(rest) = scrubber.rest() {
                tx.send(Ok(ProviderEvent::TextDelta(rest))).await;
            }
            if !thinking.is_empty() {
                tx.send(Ok(ProviderEvent::Reasoning(Reasoning {
                    text: scrubber.scrub(&thinking),
                    ..Reasoning::default()
                })))
                .await;
            }
            let prompt = record["prompt_eval_count"].as_u64();
            if let Some(warning) = window.truncated(prompt) {
                tx.send(Ok(ProviderEvent::Warning(warning))).await;
            }
            let length = record["done_reason"].as_str() == Some("length");
            if length {
                tx.send(Ok(ProviderEvent::Warning(window.answer_cut())))
                    .await;
            }
            tx.send(Ok(ProviderEvent::Usage(Usage {
                input_tokens: prompt.unwrap_or(0),
                output_tokens: record["eval_count"].as_u64().unwrap_or(0),
                ..Usage::default()
            })))
            .await;
            let finish = match () {
                _ if length => Finish::Length,
                _ if calls > 0 => Finish::ToolCalls,
                _ => Finish::Stop,
            };
            tx.send(Ok(ProviderEvent::Finish(finish))).await;
            return Ok(());
        }
    }
}

/// Counts `n` more bytes of answer against its limit.
fn count_answer(answered: &mut usize, n: usize, limits: &Limits) -> Result<(), ProviderError> {
    *answered += n;
    if *answered > limits.answer_bytes {
        return Err(Limits::exceeded(
            "an answer",
            limits.answer_bytes,
            "max_answer_bytes",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
