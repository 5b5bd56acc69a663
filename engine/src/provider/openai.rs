//! The `openai` provider: any OpenAI-compatible `/chat/completions` endpoint with SSE
//! streaming (Ollama, llama.cpp server, vLLM, LM Studio, hosted APIs). Tool calls
//! arrive as fragments keyed by index and are assembled before they are reported.
//!
//! Failures are readable: 429 and 5xx (and a refused connection) before any output
//! are retryable; a malformed chunk or a stream that ends early is not.

use std::collections::BTreeMap;

use eventsource_stream::Eventsource;
use serde_json::{Value, json};

use crate::config::ProviderConfig;
use crate::message::{Finish, Usage};
use crate::provider::context::WireIds;
use crate::provider::http::Scrubber;
use crate::provider::limits::{self, Limits};
use crate::provider::{
    ChatMessage, Provider, ProviderError, ProviderEvent, ProviderRequest, ProviderStream,
    StreamSender, ToolCall,
};

/// Talks to one OpenAI-compatible server. The API key is sent as a bearer token and
/// nowhere else: it is left out of `Debug`, and scrubbed from every error message
/// (a server may echo the request back in an error body), so it never reaches the
/// transcript, the logs or `--json` output.
#[derive(Clone)]
pub struct OpenAiProvider {
    client: reqwest::Client,
    endpoint: String,
    model: String,
    api_key: Option<String>,
    limits: Limits,
    /// The model's context window, when the config says.
    context_window: Option<u64>,
}

impl std::fmt::Debug for OpenAiProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiProvider")
            .field("endpoint", &self.endpoint)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// `text` with every occurrence of `secret` replaced.
fn scrub(text: &str, secret: Option<&str>) -> String {
    match secret {
        Some(secret) if !secret.is_empty() => text.replace(secret, "<redacted>"),
        _ => text.to_string(),
    }
}

impl OpenAiProvider {
    /// A provider for `config`: the endpoint, the model, and the key from the variable `api_key_env` names.
    pub fn new(config: &ProviderConfig) -> Result<OpenAiProvider, String> {
        let (api_key, client) = super::http::key_and_client(config)?;
        Ok(OpenAiProvider {
            client,
            endpoint: format!("{}/chat/completions", config.base_url()),
            model: config.model.clone().unwrap_or_else(|| "default".into()),
            api_key,
            limits: Limits::of(config),
            context_window: config.context_window,
        })
    }

    fn body(&self, request: &ProviderRequest) -> Value {
        let mut ids = WireIds::unique();
        let messages: Vec<Value> = request
            .messages
            .iter()
            .map(|m| wire_message(m, &mut ids))
            .collect();
        let mut body = json!({
            "model": self.model,
            "messages": messages,
            "stream": true,
            "stream_options": {"include_usage": true},
        });
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
}

/// One message of the request; call ids made unique across it ([`WireIds`]).
fn wire_message(message: &ChatMessage, ids: &mut WireIds) -> Value {
    match message {
        ChatMessage::System(text) => json!({"role": "system", "content": text}),
        ChatMessage::User(text) => json!({"role": "user", "content": text}),
        ChatMessage::Assistant {
            text, tool_calls, ..
        } => {
            let mut m = json!({"role": "assistant", "content": text});
            if !tool_calls.is_empty() {
                m["tool_calls"] = tool_calls
                    .iter()
                    .map(|c| {
                        let arguments = match &c.input {
                            Value::String(raw) => raw.clone(),
                            other => other.to_string(),
                        };
                        json!({"id": ids.call(&c.call_id), "type": "function",
                               "function": {"name": c.tool, "arguments": arguments}})
                    })
                    .collect();
            }
            m
        }
        ChatMessage::ToolResult {
            call_id, content, ..
        } => {
            json!({"role": "tool", "tool_call_id": ids.result(call_id), "content": content})
        }
    }
}

impl Provider for OpenAiProvider {
    fn name(&self) -> &str {
        "openai"
    }

    fn model(&self) -> &str {
        &self.model
    }

    fn stream(&self, request: ProviderRequest) -> ProviderStream {
        let mut http = self
            .client
            .post(&self.endpoint)
            .json_body(&self.body(&request));
        if let Some(key) = &self.api_key {
            http = http.bearer_auth(key);
        }
        let key = self.api_key.clone();
        let limits = self.limits;
        let prompt = Prompt {
            estimated: crate::provider::context::estimate_tokens(&request.messages) as u64,
            window: self.context_window,
        };
        ProviderStream::spawn(move |tx| async move {
            let mut assembly = Assembly {
                scrubber: Scrubber::new(key.as_deref()),
                limits: Some(limits),
                ..Assembly::default()
            };
            if let Err(error) = run(http, &tx, &mut assembly, limits, prompt).await {
                crate::provider::http::fail(&tx, &mut assembly.scrubber, error).await;
            }
        })
    }

    fn with_model(&self, model: &str) -> Option<std::sync::Arc<dyn Provider>> {
        let mut other = self.clone();
        other.model = model.to_string();
        Some(std::sync::Arc::new(other))
    }
}

/// What is known of a request's prompt, to tell a server that cut it.
#[derive(Debug, Clone, Copy)]
struct Prompt {
    /// About four characters a token.
    estimated: u64,
    /// The model's context window, when the config says.
    window: Option<u64>,
}

impl Prompt {
    /// A warning when the usage shows the prompt was cut to fit the model's
    /// context window: it filled the window, or the server counted far fewer
    /// tokens than the prompt has (Ollama's `/v1` cuts to 4096 tokens unless told
    /// otherwise, and says nothing).
    fn truncated(&self, usage: &Usage) -> Option<String> {
        let counted = usage.input_tokens;
        if let Some(window) = self.window
            && counted >= window
        {
            return Some(format!(
                "the prompt filled the model's context window ({window} tokens): the server may have cut it"
            ));
        }
        (self.estimated > 2048 && counted > 0 && counted * 2 < self.estimated).then(|| {
            format!(
                "the server counted {counted} prompt tokens for a prompt of about {}: it probably cut the prompt to fit the model's context window (with Ollama, use the `ollama` provider, which sets num_ctx)",
                self.estimated
            )
        })
    }
}

/// `RequestBuilder::json` without reqwest's `json` feature.
trait JsonBody {
    fn json_body(self, body: &Value) -> Self;
}

impl JsonBody for reqwest::RequestBuilder {
    fn json_body(self, body: &Value) -> Self {
        self.header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string())
    }
}

/// Streams one answer. Everything the server sends back — text, tool calls, error
/// bodies — is scrubbed of `secret` before it goes anywhere.
async fn run(
    http: reqwest::RequestBuilder,
    tx: &StreamSender,
    assembly: &mut Assembly,
    limits: Limits,
    prompt: Prompt,
) -> Result<(), ProviderError> {
    let secret = assembly.scrubber.secret().map(str::to_string);
    let secret = secret.as_deref();
    let response = crate::provider::http::send(http).await?;
    if !response.status().is_success() {
        return Err(
            crate::provider::http::refusal(response, limits.error_body_bytes, secret).await,
        );
    }
    let mut events =
        limits::capped(response.bytes_stream(), limits.event_bytes, false).eventsource();
    let mut idle = limits::Idle::new(limits.idle);
    while let Some(event) = idle.next(&mut events).await? {
        let event = event.map_err(|e| match e {
            eventsource_stream::EventStreamError::Transport(e) => e,
            other => ProviderError::fatal(format!("the provider stream broke off: {other}")),
        })?;
        let data = event.data.trim();
        if data == "[DONE]" {
            return assembly.finish(tx, prompt).await;
        }
        if data.is_empty() {
            continue;
        }
        idle.progress();
        let chunk: Value = serde_json::from_str(data).map_err(|e| {
            let snippet: String = scrub(data, secret).chars().take(120).collect();
            ProviderError::fatal(format!(
                "the provider sent a malformed chunk ({e}): {snippet}"
            ))
        })?;
        if let Some(error) = chunk.get("error") {
            let error_type = error
                .get("type")
                .or_else(|| error.get("code"))
                .and_then(Value::as_str);
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| error.to_string());
            return Err(crate::provider::http::streamed(error_type, &message));
        }
        for item in assembly.absorb(&chunk)? {
            if !tx.send(Ok(item)).await {
                return Ok(());
            }
        }
    }
    if assembly.finish.is_some() {
        return assembly.finish(tx, prompt).await;
    }
    Err(ProviderError::fatal(
        "the provider stream ended before the answer was complete",
    ))
}

/// Streamed tool-call fragments, keyed by their index.
#[derive(Debug, Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

#[derive(Debug, Default)]
struct Assembly {
    calls: BTreeMap<u64, PartialCall>,
    finish: Option<Finish>,
    usage: Option<Usage>,
    /// Keeps the API key out of what is passed on, even when the server sends it
    /// back.
    scrubber: Scrubber,
    /// Bounds on the answer and the tool calls (none in unit tests of the parts).
    limits: Option<Limits>,
    /// Answer text taken so far, in bytes.
    answered: usize,
}

impl Assembly {
    /// Takes one chunk; returns the text to stream now.
    fn absorb(&mut self, chunk: &Value) -> Result<Vec<ProviderEvent>, ProviderError> {
        let mut out = Vec::new();
        if let Some(usage) = chunk.get("usage").filter(|u| !u.is_null()) {
            self.usage = Some(Usage {
                input_tokens: usage["prompt_tokens"].as_u64().unwrap_or(0),
                output_tokens: usage["completion_tokens"].as_u64().unwrap_or(0),
                cache_read_tokens: usage["prompt_tokens_details"]["cached_tokens"]
                    .as_u64()
                    .unwrap_or(0),
                ..Usage::default()
            });
        }
        let Some(choices) = chunk.get("choices").and_then(Value::as_array) else {
            return Ok(out);
        };
        for choice in choices {
            let delta = &choice["delta"];
            if let Some(text) = delta["content"].as_str()
                && !text.is_empty()
            {
                self.answered += text.len();
                if let Some(limits) = self.limits
                    && self.answered > limits.answer_bytes
                {
                    return Err(Limits::exceeded(
                        "an answer",
                        limits.answer_bytes,
                        "max_answer_bytes",
                    ));
                }
                if let Some(text) = self.scrubber.pass(text) {
                    out.push(ProviderEvent::TextDelta(text));
                }
            }
            if let Some(calls) = delta["tool_calls"].as_array() {
                for call in calls {
                    let index = call["index"].as_u64().ok_or_else(|| {
                        ProviderError::fatal(format!("a tool call fragment has no index: {call}"))
                    })?;
                    let partial = self.calls.entry(index).or_default();
                    if let Some(id) = call["id"].as_str() {
                        partial.id.push_str(id);
                    }
                    if let Some(name) = call["function"]["name"].as_str() {
                        partial.name.push_str(name);
                    }
                    if let Some(args) = call["function"]["arguments"].as_str() {
                        partial.arguments.push_str(args);
                    }
                    if let Some(limits) = self.limits
                        && partial.arguments.len() > limits.tool_arguments_bytes
                    {
                        return Err(Limits::exceeded(
                            "a tool call's arguments",
                            limits.tool_arguments_bytes,
                            "max_tool_arguments_bytes",
                        ));
                    }
                }
            }
            if let Some(reason) = choice["finish_reason"].as_str() {
                self.finish = Some(match reason {
                    "stop" => Finish::Stop,
                    "tool_calls" | "function_call" => Finish::ToolCalls,
                    "length" => Finish::Length,
                    "content_filter" => Finish::ContentFilter,
                    _ => Finish::Stop,
                });
            }
        }
        Ok(out)
    }

    async fn finish(&mut self, tx: &StreamSender, prompt: Prompt) -> Result<(), ProviderError> {
        if let Some(held) = self.scrubber.rest() {
            tx.send(Ok(ProviderEvent::TextDelta(held))).await;
        }
        let secret = self.scrubber.secret().map(str::to_string);
        let calls = std::mem::take(&mut self.calls);
        let has_calls = !calls.is_empty();
        for (index, mut call) in calls {
            call.arguments = scrub(&call.arguments, secret.as_deref());
            call.name = scrub(&call.name, secret.as_deref());
            call.id = scrub(&call.id, secret.as_deref());
            if call.name.is_empty() {
                return Err(ProviderError::fatal(format!(
                    "tool call {index} arrived without a name"
                )));
            }
            let input = if call.arguments.trim().is_empty() {
                Value::Object(Default::default())
            } else {
                serde_json::from_str(&call.arguments).unwrap_or(Value::String(call.arguments))
            };
            let call_id = if call.id.is_empty() {
                format!("call_{index}")
            } else {
                call.id
            };
            tx.send(Ok(ProviderEvent::ToolCall(ToolCall {
                call_id,
                tool: call.name,
                input,
            })))
            .await;
        }
        if let Some(usage) = self.usage {
            if let Some(warning) = prompt.truncated(&usage) {
                tx.send(Ok(ProviderEvent::Warning(warning))).await;
            }
            tx.send(Ok(ProviderEvent::Usage(usage))).await;
        }
        let finish = match self.finish {
            Some(Finish::Stop) | None if has_calls => Finish::ToolCalls,
            Some(f) => f,
            None => Finish::Stop,
        };
        tx.send(Ok(ProviderEvent::Finish(finish))).await;
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests;
