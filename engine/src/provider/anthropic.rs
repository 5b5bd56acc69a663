//! The `anthropic` provider: the Messages API (`POST {base_url}/v1/messages`,
//! streamed), which Claude serves and Ollama (0.14+) and llama.cpp's server speak
//! too.
//!
//! The request carries the system prompt, the tools and the conversation, with
//! prompt-cache breakpoints on the system prompt, the tools and the last user turn.
//! Every `tool_use` is answered by a `tool_result` with its id (recovery's "outcome
//! unknown" included), and the model's thinking goes back with its signature, as the
//! API requires. The stream's events: `message_start` (input and cache usage),
//! `content_block_start` / `_delta` / `_stop` for `text`, `tool_use` (its JSON
//! accumulated and parsed at the block's stop), `thinking` (with its signature) and
//! `redacted_thinking`, `message_delta` (stop reason, output usage), `message_stop`,
//! `ping` (which is not progress for the idle bound, protocol §4.15); unknown
//! events are ignored. An `error` event ends the step with that error, retryable
//! when nothing was streamed yet and it is the server's load.

use std::collections::BTreeMap;

use eventsource_stream::Eventsource;
use serde_json::{Value, json};

use crate::config::ProviderConfig;
use crate::message::{Finish, Reasoning, Usage};
use crate::provider::context::WireIds;
use crate::provider::http::{self, Scrubber};
use crate::provider::limits::{self, Limits};
use crate::provider::{
    ChatMessage, Provider, ProviderError, ProviderEvent, ProviderRequest, ProviderStream,
    StreamSender, ToolCall,
};

/// The API version every request names.
pub const API_VERSION: &str = "2023-06-01";

/// What stands for a user's turn of whitespace alone, which the API refuses.
pub const EMPTY: &str = "(empty message)";

/// Talks to one Messages API server. The key goes in `x-api-key` and nowhere else.
#[derive(Clone)]
pub struct AnthropicProvider {
    client: reqwest::Client,
    endpoint: String,
    model: String,
    api_key: Option<String>,
    limits: Limits,
    max_tokens: u32,
    thinking_budget: Option<u32>,
}

impl std::fmt::Debug for AnthropicProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnthropicProvider")
            .field("endpoint", &self.endpoint)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl AnthropicProvider {
    pub fn new(config: &ProviderConfig) -> Result<AnthropicProvider, String> {
        let (api_key, client) = super::http::key_and_client(config)?;
        Ok(AnthropicProvider {
            client,
            endpoint: format!("{}/v1/messages", config.base_url()),
            model: config.model.clone().ok_or(
                "provider.model (or --model) is required for `anthropic` (e.g. claude-sonnet-4-5)",
            )?,
            api_key,
            limits: Limits::of(config),
            max_tokens: config.max_tokens,
            thinking_budget: config.thinking_budget,
        })
    }

    /// The request body (protocol §4.18).
    ///
    /// A request without tools (a compaction's) cannot carry `tool_use` or
    /// `tool_result` blocks — the API refuses them unless tools are defined — so
    /// there the calls and their results are told as text. Reasoning without a
    /// signature (another provider's thinking, which the API would refuse) is not
    /// sent back. Call ids are sent valid and unique ([`WireIds`]), each result with
    /// its call's. No text block is of whitespace alone, which the API refuses.
    pub fn body(&self, request: &ProviderRequest) -> Value {
        let cache = json!({"type": "ephemeral"});
        let tool_blocks = !request.tools.is_empty();
        let mut ids = WireIds::strict();
        let mut system = Vec::new();
        let mut messages: Vec<Value> = Vec::new();
        // Consecutive user content (tool results, then a note or a prompt) is one
        // user message: the API takes turns that alternate.
        let user_block = |messages: &mut Vec<Value>, block: Value| match messages.last_mut() {
            Some(last) if last["role"] == "user" => {
                last["content"].as_array_mut().expect("content").push(block)
            }
            _ => messages.push(json!({"role": "user", "content": [block]})),
        };
        for message in &request.messages {
            match message {
                ChatMessage::System(text) => system.push(text.as_str()),
                // The API refuses a text block of whitespace alone: such a prompt
                // is left out, or stands as a placeholder when it alone would
                // make the user's turn.
                ChatMessage::User(text) if text.trim().is_empty() => {
                    if messages.last().is_none_or(|m| m["role"] != "user") {
                        user_block(&mut messages, json!({"type": "text", "text": EMPTY}));
                    }
                }
                ChatMessage::User(text) => {
                    user_block(&mut messages, json!({"type": "text", "text": text}));
                }
                ChatMessage::ToolResult { tool, content, .. } if !tool_blocks => {
                    let told = format!("[result of {tool}: {content}]");
                    user_block(&mut messages, json!({"type": "text", "text": told}));
                }
                ChatMessage::ToolResult {
                    call_id,
                    content,
                    is_error,
                    ..
                } => {
                    // Text of whitespace alone is refused by the API, a result's
                    // too: an empty output is said as such.
                    let content = if content.trim().is_empty() {
                        "(no output)"
                    } else {
                        content.as_str()
                    };
                    let mut block = json!({"type": "tool_result",
                                           "tool_use_id": ids.result(call_id),
                                           "content": content});
                    if *is_error {
                        block["is_error"] = json!(true);
                    }
                    user_block(&mut messages, block);
                }
                ChatMessage::Assistant {
                    text,
                    tool_calls,
                    reasoning,
                } => {
                    let mut content: Vec<Value> = reasoning
                        .iter()
                        .filter_map(|r| match (&r.redacted, &r.signature) {
                            (Some(data), _) if !data.is_empty() => {
                                Some(json!({"type": "redacted_thinking", "data": data}))
                            }
                            (None, Some(signature)) if !signature.is_empty() => {
                                Some(json!({"type": "thinking", "thinking": r.text,
                                            "signature": signature}))
                            }
                            _ => None,
                        })
                        .collect();
                    let mut said = text.clone();
                    if !tool_blocks {
                        for call in tool_calls {
                            if !said.is_empty() {
                                said.push_str("\n\n");
                            }
                            said.push_str(&format!("[called {} with {}]", call.tool, call.input));
                        }
                    }
                    // Text of whitespace alone (a model's "\n\n" before a call) is
                    // left out; a turn left with nothing is not sent.
                    if !said.trim().is_empty() {
                        content.push(json!({"type": "text", "text": said}));
                    }
                    for call in tool_calls.iter().filter(|_| tool_blocks) {
                        // Arguments that never parsed are sent as an empty object:
                        // the call's result already says they were invalid.
                        let input = match &call.input {
                            Value::Object(_) => call.input.clone(),
                            _ => json!({}),
                        };
                        content.push(json!({"type": "tool_use", "id": ids.call(&call.call_id),
                                            "name": call.tool, "input": input}));
                    }
                    if !content.is_empty() {
                        messages.push(json!({"role": "assistant", "content": content}));
                    }
                }
            }
        }
        // The last user turn is a cache breakpoint: the next step reads all before it.
        if let Some(last) = messages.iter_mut().rev().find(|m| m["role"] == "user")
            && let Some(block) = last["content"].as_array_mut().and_then(|c| c.last_mut())
        {
            block["cache_control"] = cache.clone();
        }
        let mut body = json!({
            "model": self.model,
            "max_tokens": self.max_tokens,
            "stream": true,
            "messages": messages,
        });
        if !system.is_empty() {
            body["system"] =
                json!([{"type": "text", "text": system.join("\n\n"), "cache_control": cache}]);
        }
        if !request.tools.is_empty() {
            let mut tools: Vec<Value> = request
                .tools
                .iter()
                .map(|t| {
                    json!({"name": t.name, "description": t.description,
                           "input_schema": t.parameters})
                })
                .collect();
            if let Some(last) = tools.last_mut() {
                last["cache_control"] = cache;
            }
            body["tools"] = Value::Array(tools);
        }
        if let Some(budget) = self.thinking_budget {
            body["thinking"] = json!({"type": "enabled", "budget_tokens": budget});
        }
        body
    }
}

impl Provider for AnthropicProvider {
    fn name(&self) -> &str {
        "anthropic"
    }

    fn model(&self) -> &str {
        &self.model
    }

    fn stream(&self, request: ProviderRequest) -> ProviderStream {
        let mut http = self
            .client
            .post(&self.endpoint)
            .header("anthropic-version", API_VERSION)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(self.body(&request).to_string());
        if let Some(key) = &self.api_key {
            http = http.header("x-api-key", key);
        }
        let key = self.api_key.clone();
        let limits = self.limits;
        ProviderStream::spawn(move |tx| async move {
            let mut scrubber = Scrubber::new(key.as_deref());
            if let Err(error) = run(http, &tx, &mut scrubber, limits).await {
                http::fail(&tx, &mut scrubber, error).await;
            }
        })
    }

    fn with_model(&self, model: &str) -> Option<std::sync::Arc<dyn Provider>> {
        let mut other = self.clone();
        other.model = model.to_string();
        Some(std::sync::Arc::new(other))
    }
}

/// One content block of the answer, as it streams.
#[derive(Debug)]
enum Block {
    Text,
    ToolUse {
        id: String,
        name: String,
        /// The input the block started with, used when no `input_json_delta`
        /// follows.
        input: Value,
        json: String,
    },
    Thinking {
        text: String,
        signature: Option<String>,
    },
    Redacted(String),
    /// A block of a kind Steward does not know: ignored.
    Other,
}

/// The answer so far.
#[derive(Debug, Default)]
struct Answer {
    blocks: BTreeMap<u64, Block>,
    usage: Usage,
    finish: Option<Finish>,
    warnings: Vec<String>,
    /// Bytes of text, thinking and signatures taken so far (protocol §4.15).
    answered: usize,
}

/// Streams one answer; everything the server sends back is scrubbed of the key.
/// The idle bound (protocol §4.15) times events that carry something: a `ping` is
/// not progress.
async fn run(
    http: reqwest::RequestBuilder,
    tx: &StreamSender,
    scrubber: &mut Scrubber,
    limits: Limits,
) -> Result<(), ProviderError> {
    let response = http::send(http).await?;
    if !response.status().is_success() {
        return Err(http::refusal(response, limits.error_body_bytes, scrubber.secret()).await);
    }
    let mut events =
        limits::capped(response.bytes_stream(), limits.event_bytes, false).eventsource();
    let mut idle = limits::Idle::new(limits.idle);
    let mut answer = Answer::default();
    while let Some(event) = idle.next(&mut events).await? {
        let event = event.map_err(|e| match e {
            eventsource_stream::EventStreamError::Transport(e) => e,
            other => ProviderError::fatal(format!("the provider stream broke off: {other}")),
        })?;
        let data = event.data.trim();
        if data.is_empty() {
            continue;
        }
        let data: Value = serde_json::from_str(data).map_err(|e| {
            let snippet: String = scrubber.scrub(data).chars().take(120).collect();
            ProviderError::fatal(format!(
                "the provider sent a malformed event ({e}): {snippet}"
            ))
        })?;
        // The event's name is in its data too; a server that leaves out `event:`
        // lines is read all the same.
        let kind = match event.event.as_str() {
            "" | "message" => data["type"].as_str().unwrap_or("").to_string(),
            name => name.to_string(),
        };
        if kind != "ping" {
            idle.progress();
        }
        for item in answer.absorb(&kind, &data, scrubber, &limits)? {
            if !tx.send(Ok(item)).await {
                return Ok(());
            }
        }
        if kind == "message_stop" {
            return answer.finish(tx, scrubber).await;
        }
    }
    if answer.finish.is_some() {
        return answer.finish(tx, scrubber).await;
    }
    Err(ProviderError::fatal(
        "the provider stream ended before the answer was complete",
    ))
}

impl Answer {
    /// Takes one event; returns what to stream now.
    fn absorb(
        &mut self,
        kind: &str,
        data: &Value,
        scrubber: &mut Scrubber,
        limits: &Limits,
    ) -> Result<Vec<ProviderEvent>, ProviderError> {
        let mut out = Vec::new();
        let index = data["index"].as_u64().unwrap_or(0);
        match kind {
            "message_start" => self.usage_from(&data["message"]["usage"]),
            "content_block_start" => {
                let block = &data["content_block"];
                let started = match block["type"].as_str().unwrap_or("") {
                    "text" => {
                        if let Some(text) = block["text"].as_str() {
                            self.text(text, scrubber, limits, &mut out)?;
                        }
                        Block::Text
                    }
                    "tool_use" => Block::ToolUse {
                        id: block["id"].as_str().unwrap_or("").to_string(),
                        name: block["name"].as_str().unwrap_or("").to_string(),
                        input: block["input"].clone(),
                        json: String::new(),
                    },
                    "thinking" => {
                        let text = block["thinking"].as_str().unwrap_or("");
                        let signature = block["signature"].as_str().unwrap_or("");
                        self.count(text.len() + signature.len(), limits)?;
                        Block::Thinking {
                            text: text.to_string(),
                            signature: (!signature.is_empty()).then(|| signature.to_string()),
                        }
                    }
                    "redacted_thinking" => {
                        let data = block["data"].as_str().unwrap_or("");
                        self.count(data.len(), limits)?;
                        Block::Redacted(data.to_string())
                    }
                    _ => Block::Other,
                };
                self.blocks.insert(index, started);
            }
            "content_block_delta" => {
                let delta = &data["delta"];
                let block = self.blocks.get_mut(&index);
                match (delta["type"].as_str().unwrap_or(""), block) {
                    ("text_delta", _) => {
                        let text = delta["text"].as_str().unwrap_or("");
                        self.text(text, scrubber, limits, &mut out)?;
                    }
                    ("input_json_delta", Some(Block::ToolUse { json, .. })) => {
                        json.push_str(delta["partial_json"].as_str().unwrap_or(""));
                        if json.len() > limits.tool_arguments_bytes {
                            return Err(Limits::exceeded(
                                "a tool call's arguments",
                                limits.tool_arguments_bytes,
                                "max_tool_arguments_bytes",
                            ));
                        }
                    }
                    ("thinking_delta", Some(Block::Thinking { text, .. })) => {
                        let more = delta["thinking"].as_str().unwrap_or("");
                        text.push_str(more);
                        self.count(more.len(), limits)?;
                    }
                    ("signature_delta", Some(Block::Thinking { signature, .. })) => {
                        let more = delta["signature"].as_str().unwrap_or("");
                        signature.get_or_insert_with(String::new).push_str(more);
                        self.count(more.len(), limits)?;
                    }
                    _ => {}
                }
            }
            "content_block_stop" => match self.blocks.remove(&index) {
                Some(Block::ToolUse {
                    id,
                    name,
                    input,
                    json,
                }) => {
                    let json = scrubber.scrub(&json);
                    let input = if json.trim().is_empty() {
                        // No deltas: the input the block started with, if any.
                        match input {
                            Value::Object(_) => scrubber.scrub_value(input),
                            _ => Value::Object(Default::default()),
                        }
                    } else {
                        serde_json::from_str(&json).unwrap_or(Value::String(json))
                    };
                    if name.is_empty() {
                        return Err(ProviderError::fatal(format!(
                            "tool call {index} arrived without a name"
                        )));
                    }
                    let call_id = if id.is_empty() {
                        format!("toolu_{index}")
                    } else {
                        scrubber.scrub(&id)
                    };
                    out.push(ProviderEvent::ToolCall(ToolCall {
                        call_id,
                        tool: scrubber.scrub(&name),
                        input,
                    }));
                }
                Some(Block::Thinking { text, signature }) => {
                    out.push(ProviderEvent::Reasoning(Reasoning {
                        text: scrubber.scrub(&text),
                        signature: signature.map(|s| scrubber.scrub(&s)),
                        redacted: None,
                    }));
                }
                Some(Block::Redacted(data)) => {
                    out.push(ProviderEvent::Reasoning(Reasoning {
                        text: String::new(),
                        signature: None,
                        redacted: Some(scrubber.scrub(&data)),
                    }));
                }
                Some(Block::Text | Block::Other) | None => {}
            },
            "message_delta" => {
                if let Some(reason) = data["delta"]["stop_reason"].as_str() {
                    self.finish = Some(match reason {
                        "tool_use" => Finish::ToolCalls,
                        "max_tokens" => Finish::Length,
                        "refusal" => Finish::ContentFilter,
                        "model_context_window_exceeded" => {
                            self.warnings
                                .push("the answer stopped at the model's context window".into());
                            Finish::Length
                        }
                        _ => Finish::Stop,
                    });
                }
                self.usage_from(&data["usage"]);
            }
            "error" => {
                let error = &data["error"];
                let message = scrubber.scrub(error["message"].as_str().unwrap_or("unknown error"));
                return Err(http::streamed(error["type"].as_str(), &message));
            }
            // `ping`, `message_stop` (handled by the caller) and events added later.
            _ => {}
        }
        Ok(out)
    }

    /// Counts `n` more bytes of the answer — text, thinking or a signature —
    /// against its limit.
    fn count(&mut self, n: usize, limits: &Limits) -> Result<(), ProviderError> {
        self.answered += n;
        if self.answered > limits.answer_bytes {
            return Err(Limits::exceeded(
                "an answer",
                limits.answer_bytes,
                "max_answer_bytes",
            ));
        }
        Ok(())
    }

    /// Streams `text`, counting it against the answer's limit.
    fn text(
        &mut self,
        text: &str,
        scrubber: &mut Scrubber,
        limits: &Limits,
        out: &mut Vec<ProviderEvent>,
    ) -> Result<(), ProviderError> {
        self.count(text.len(), limits)?;
        if let Some(text) = scrubber.pass(text) {
            out.push(ProviderEvent::TextDelta(text));
        }
        Ok(())
    }

    /// Takes what a `usage` object reports (each event reports part of it).
    fn usage_from(&mut self, usage: &Value) {
        let field = |name: &str| usage.get(name).and_then(Value::as_u64);
        if let Some(n) = field("input_tokens") {
            self.usage.input_tokens = n;
        }
        if let Some(n) = field("output_tokens") {
            self.usage.output_tokens = n;
        }
        if let Some(n) = field("cache_read_input_tokens") {
            self.usage.cache_read_tokens = n;
        }
        if let Some(n) = field("cache_creation_input_tokens") {
            self.usage.cache_write_tokens = n;
        }
    }

    async fn finish(
        &mut self,
        tx: &StreamSender,
        scrubber: &mut Scrubber,
    ) -> Result<(), ProviderError> {
        if let Some(rest) = scrubber.rest() {
            tx.send(Ok(ProviderEvent::TextDelta(rest))).await;
        }
        for warning in std::mem::take(&mut self.warnings) {
            tx.send(Ok(ProviderEvent::Warning(warning))).await;
        }
        tx.send(Ok(ProviderEvent::Usage(self.usage))).await;
        tx.send(Ok(ProviderEvent::Finish(
            self.finish.unwrap_or(Finish::Stop),
        )))
        .await;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
