//! The `anthropic` provider against recorded Messages API streams, served by the
//! fake server on 127.0.0.1: every event type, errors before and during the stream,
//! and the request Steward sends back (tool results, thinking, cache breakpoints).

use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::json;

use super::*;
use crate::provider::fake::{Reply, serve};
use crate::provider::{ErrorKind, Purpose, ToolSpec};

fn config(url: &str) -> ProviderConfig {
    ProviderConfig {
        name: "anthropic".into(),
        base_url: Some(url.to_string()),
        model: Some("claude-test".into()),
        request_timeout_ms: 5_000,
        max_tokens: 2048,
        ..ProviderConfig::default()
    }
}

fn request(messages: Vec<ChatMessage>) -> ProviderRequest {
    ProviderRequest {
        session_id: "ses_1".into(),
        purpose: Purpose::Step,
        step_index: 0,
        messages,
        tools: vec![
            ToolSpec {
                name: "read_file".into(),
                description: "read".into(),
                parameters: json!({"type": "object"}),
            },
            ToolSpec {
                name: "run_command".into(),
                description: "run".into(),
                parameters: json!({"type": "object"}),
            },
        ],
    }
}

fn hello() -> Vec<ChatMessage> {
    vec![
        ChatMessage::System("sys".into()),
        ChatMessage::User("hi".into()),
    ]
}

async fn collect(
    provider: &AnthropicProvider,
    messages: Vec<ChatMessage>,
) -> Vec<Result<ProviderEvent, ProviderError>> {
    let mut stream = provider.stream(request(messages));
    let mut out = Vec::new();
    while let Some(item) = stream.next().await {
        out.push(item);
    }
    out
}

/// A turn that streams text and calls a tool, as the Messages API sends it.
const TEXT_AND_TOOL_USE: &[(&str, &str)] = &[
    (
        "message_start",
        r#"{"type":"message_start","message":{"id":"msg_01","type":"message","role":"assistant","model":"claude-test","content":[],"stop_reason":null,"usage":{"input_tokens":25,"cache_creation_input_tokens":5,"cache_read_input_tokens":10,"output_tokens":1}}}"#,
    ),
    (
        "content_block_start",
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
    ),
    ("ping", r#"{"type":"ping"}"#),
    (
        "content_block_delta",
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Let me "}}"#,
    ),
    (
        "content_block_delta",
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"look."}}"#,
    ),
    (
        "content_block_stop",
        r#"{"type":"content_block_stop","index":0}"#,
    ),
    (
        "content_block_start",
        r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_01","name":"run_command","input":{}}}"#,
    ),
    (
        "content_block_delta",
        r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}"#,
    ),
    (
        "content_block_delta",
        r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"comm"}}"#,
    ),
    (
        "content_block_delta",
        r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"and\": \"ls\"}"}}"#,
    ),
    (
        "content_block_stop",
        r#"{"type":"content_block_stop","index":1}"#,
    ),
    (
        "some_future_event",
        r#"{"type":"some_future_event","what":"ignored"}"#,
    ),
    (
        "message_delta",
        r#"{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":30}}"#,
    ),
    ("message_stop", r#"{"type":"message_stop"}"#),
];

#[tokio::test]
async fn r4_18_a_streamed_text_and_tool_use_turn() {
    let (url, seen) = serve(vec![Reply::named_sse(TEXT_AND_TOOL_USE)]).await;
    let mut config = config(&url);
    // A variable cargo sets for every test process, so the test never sets one.
    config.api_key_env = Some("CARGO_PKG_NAME".into());
    let key = std::env::var("CARGO_PKG_NAME").unwrap();
    let keyed = AnthropicProvider::new(&config).unwrap();
    collect(&keyed, hello()).await;
    config.api_key_env = None;
    let provider = AnthropicProvider::new(&config).unwrap();
    let events: Vec<ProviderEvent> = collect(&provider, hello())
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        events,
        vec![
            ProviderEvent::TextDelta("Let me ".into()),
            ProviderEvent::TextDelta("look.".into()),
            ProviderEvent::ToolCall(ToolCall {
                call_id: "toolu_01".into(),
                tool: "run_command".into(),
                input: json!({"command": "ls"}),
            }),
            ProviderEvent::Usage(Usage {
                input_tokens: 25,
                output_tokens: 30,
                cache_read_tokens: 10,
                cache_write_tokens: 5,
            }),
            ProviderEvent::Finish(Finish::ToolCalls),
        ]
    );
    let seen = seen.lock().unwrap();
    let head = seen.requests[0].to_ascii_lowercase();
    assert!(!seen.requests[1].to_ascii_lowercase().contains("x-api-key"));
    assert!(head.starts_with("post /v1/messages "), "{head}");
    assert!(head.contains(&format!("x-api-key: {key}")), "{head}");
    assert!(head.contains("anthropic-version: 2023-06-01"), "{head}");
    let body = seen.body(0);
    assert_eq!(body["model"], "claude-test");
    assert_eq!(body["max_tokens"], 2048);
    assert_eq!(body["stream"], true);
    // Cache breakpoints: the system prompt, the last tool, the last user turn.
    assert_eq!(
        body["system"],
        json!([{"type": "text", "text": "sys", "cache_control": {"type": "ephemeral"}}])
    );
    assert_eq!(body["tools"][0].get("cache_control"), None);
    assert_eq!(body["tools"][1]["cache_control"]["type"], "ephemeral");
    assert_eq!(
        body["messages"],
        json!([{"role": "user", "content": [
            {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}
        ]}])
    );
}

#[tokio::test]
async fn r4_18_thinking_is_kept_with_its_signature_and_sent_back() {
    let (url, seen) = serve(vec![Reply::named_sse(&[
        (
            "message_start",
            r#"{"type":"message_start","message":{"usage":{"input_tokens":3,"output_tokens":1}}}"#,
        ),
        (
            "content_block_start",
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}"#,
        ),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"The user "}}"#,
        ),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"greets me."}}"#,
        ),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQBCgIYAh"}}"#,
        ),
        (
            "content_block_stop",
            r#"{"type":"content_block_stop","index":0}"#,
        ),
        (
            "content_block_start",
            r#"{"type":"content_block_start","index":1,"content_block":{"type":"redacted_thinking","data":"EmwKAhgB"}}"#,
        ),
        (
            "content_block_stop",
            r#"{"type":"content_block_stop","index":1}"#,
        ),
        (
            "content_block_start",
            r#"{"type":"content_block_start","index":2,"content_block":{"type":"text","text":""}}"#,
        ),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":2,"delta":{"type":"text_delta","text":"Hello."}}"#,
        ),
        (
            "content_block_stop",
            r#"{"type":"content_block_stop","index":2}"#,
        ),
        (
            "message_delta",
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":9}}"#,
        ),
        ("message_stop", r#"{"type":"message_stop"}"#),
    ])])
    .await;
    let mut config = config(&url);
    config.thinking_budget = Some(1024);
    let provider = AnthropicProvider::new(&config).unwrap();
    let events: Vec<ProviderEvent> = collect(&provider, hello())
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let thinking = Reasoning {
        text: "The user greets me.".into(),
        signature: Some("EqQBCgIYAh".into()),
        redacted: None,
    };
    let redacted = Reasoning {
        text: String::new(),
        signature: None,
        redacted: Some("EmwKAhgB".into()),
    };
    assert_eq!(
        events[..3],
        [
            ProviderEvent::Reasoning(thinking.clone()),
            ProviderEvent::Reasoning(redacted.clone()),
            ProviderEvent::TextDelta("Hello.".into()),
        ]
    );
    assert_eq!(events.last(), Some(&ProviderEvent::Finish(Finish::Stop)));
    assert_eq!(
        seen.lock().unwrap().body(0)["thinking"],
        json!({"type": "enabled", "budget_tokens": 1024})
    );
    // Sent back before the text and the call, as the API requires.
    let body = provider.body(&request(vec![
        ChatMessage::User("hi".into()),
        ChatMessage::Assistant {
            text: "Hello.".into(),
            tool_calls: vec![ToolCall {
                call_id: "toolu_9".into(),
                tool: "read_file".into(),
                input: json!({"path": "a"}),
            }],
            reasoning: vec![thinking, redacted],
        },
        ChatMessage::ToolResult {
            call_id: "toolu_9".into(),
            tool: "read_file".into(),
            content: "A".into(),
            is_error: false,
        },
    ]));
    assert_eq!(
        body["messages"][1]["content"],
        json!([
            {"type": "thinking", "thinking": "The user greets me.", "signature": "EqQBCgIYAh"},
            {"type": "redacted_thinking", "data": "EmwKAhgB"},
            {"type": "text", "text": "Hello."},
            {"type": "tool_use", "id": "toolu_9", "name": "read_file", "input": {"path": "a"}}
        ])
    );
}

#[tokio::test]
async fn r4_18_an_error_event_mid_stream_ends_the_step_with_it() {
    let (url, _) = serve(vec![Reply::named_sse(&[
        (
            "message_start",
            r#"{"type":"message_start","message":{"usage":{"input_tokens":3,"output_tokens":1}}}"#,
        ),
        (
            "content_block_start",
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        ),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Half"}}"#,
        ),
        (
            "error",
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        ),
    ])])
    .await;
    let provider = AnthropicProvider::new(&config(&url)).unwrap();
    let events = collect(&provider, hello()).await;
    assert_eq!(
        events[0],
        Ok(ProviderEvent::TextDelta("Half".into())),
        "{events:?}"
    );
    let error = events.last().unwrap().clone().unwrap_err();
    assert_eq!(error.kind, ErrorKind::Overloaded);
    // Retryable as an error, but text was streamed: the runner does not retry it.
    assert!(error.retryable);
    assert_eq!(
        error.message,
        "the provider is overloaded: the provider reported an error: Overloaded"
    );
}

#[tokio::test]
async fn r4_18_a_429_says_when_to_try_again() {
    let (url, _) = serve(vec![
        Reply::status(
            429,
            r#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}"#,
        )
        .header("retry-after", "12")
        .header("x-should-retry", "true"),
    ])
    .await;
    let provider = AnthropicProvider::new(&config(&url)).unwrap();
    let error = collect(&provider, hello())
        .await
        .pop()
        .unwrap()
        .unwrap_err();
    assert_eq!(error.kind, ErrorKind::RateLimited);
    assert!(error.retryable);
    assert_eq!(error.retry_after, Some(Duration::from_secs(12)));
    assert!(
        error.message.starts_with("rate-limited: "),
        "{}",
        error.message
    );
}

#[tokio::test]
async fn r4_18_a_recovered_call_is_answered_by_a_tool_result_with_its_id() {
    use crate::message::{
        AssistantData, MessageData, MessageTime, Part, TOOL_OUTCOME_UNKNOWN, ToolPart, ToolState,
        ToolStatus, UserData,
    };
    use crate::projection::MessageRow;
    let mut unknown = ToolState::pending(json!({"command": "sleep 300"}));
    unknown.status = ToolStatus::Error;
    unknown.error = Some(TOOL_OUTCOME_UNKNOWN.into());
    let row = |seq, data| MessageRow {
        id: format!("msg_{seq}"),
        session_id: "ses_1".into(),
        seq,
        time_created: 0,
        time_updated: 0,
        data,
    };
    let transcript = vec![
        row(
            1,
            MessageData::User(UserData {
                input_id: "inp_1".into(),
                text: "run it".into(),
                content: Vec::new(),
            }),
        ),
        row(
            2,
            MessageData::Assistant(AssistantData {
                execution_id: "exe_1".into(),
                provider: "anthropic".into(),
                model: "claude-test".into(),
                time: MessageTime {
                    created: 0,
                    completed: Some(1),
                },
                finish: None,
                error: None,
                usage: None,
                parts: vec![Part::Tool(ToolPart {
                    id: "prt_1".into(),
                    call_id: "toolu_crash".into(),
                    tool: "run_command".into(),
                    state: unknown,
                })],
                unavailable: Vec::new(),
                warnings: Vec::new(),
            }),
        ),
    ];
    let messages = crate::provider::context::conversation("/w", &transcript);
    let (url, _) = serve(vec![Reply::named_sse(TEXT_AND_TOOL_USE)]).await;
    let provider = AnthropicProvider::new(&config(&url)).unwrap();
    let body = provider.body(&request(messages));
    assert_eq!(
        body["messages"][2],
        json!({"role": "user", "content": [{
            "type": "tool_result", "tool_use_id": "toolu_crash",
            "content": format!("Error: {TOOL_OUTCOME_UNKNOWN}"), "is_error": true,
            "cache_control": {"type": "ephemeral"}
        }]})
    );
    assert_eq!(body["messages"][1]["content"][0]["id"], "toolu_crash");
}

/// A provider whose key is `CARGO_PKG_NAME`'s value, a variable cargo sets for every
/// test process (the tests never set one).
fn keyed(url: &str) -> (AnthropicProvider, String) {
    let mut config = config(url);
    config.api_key_env = Some("CARGO_PKG_NAME".into());
    (
        AnthropicProvider::new(&config).unwrap(),
        std::env::var("CARGO_PKG_NAME").unwrap(),
    )
}

fn start() -> (&'static str, &'static str) {
    (
        "message_start",
        r#"{"type":"message_start","message":{"usage":{"input_tokens":3,"output_tokens":1}}}"#,
    )
}

fn text_block(index: u32) -> (&'static str, String) {
    (
        "content_block_start",
        format!(
            r#"{{"type":"content_block_start","index":{index},"content_block":{{"type":"text","text":""}}}}"#
        ),
    )
}

fn delta(index: u32, delta: Value) -> (&'static str, String) {
    (
        "content_block_delta",
        json!({"type": "content_block_delta", "index": index, "delta": delta}).to_string(),
    )
}

fn named(events: &[(&str, String)]) -> Reply {
    let events: Vec<(&str, &str)> = events.iter().map(|(n, d)| (*n, d.as_str())).collect();
    Reply::named_sse(&events)
}

#[tokio::test]
async fn text_streamed_before_an_error_reaches_the_step_with_a_key_set() {
    let (s, d) = start();
    let (url, _) = serve(vec![named(&[
        (s, d.into()),
        text_block(0),
        delta(0, json!({"type": "text_delta", "text": "Half"})),
        (
            "error",
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#.into(),
        ),
    ])])
    .await;
    let (provider, _) = keyed(&url);
    let events = collect(&provider, hello()).await;
    // "Half" cannot begin the key: it is passed on at once, never held back and lost.
    assert_eq!(events[0], Ok(ProviderEvent::TextDelta("Half".into())));
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[1].clone().unwrap_err().kind, ErrorKind::Overloaded);
}

#[tokio::test]
async fn r4_15_a_stream_of_pings_alone_times_out() {
    let (s, d) = start();
    let mut events = vec![(s, d.to_string()), text_block(0)];
    events.extend(std::iter::repeat_n(
        ("ping", r#"{"type":"ping"}"#.to_string()),
        20,
    ));
    let mut reply = named(&events);
    reply.pause = Duration::from_millis(100);
    let (url, _) = serve(vec![reply]).await;
    let mut config = config(&url);
    config.request_timeout_ms = 500;
    let provider = AnthropicProvider::new(&config).unwrap();
    let started = std::time::Instant::now();
    let error = collect(&provider, hello())
        .await
        .pop()
        .unwrap()
        .unwrap_err();
    assert_eq!(
        error.message,
        "the provider sent no complete event for 500 ms: the step was stopped"
    );
    assert!(started.elapsed() < Duration::from_millis(1800));
}

#[tokio::test]
async fn a_tool_use_block_that_starts_with_its_input_runs_with_it() {
    let (s, d) = start();
    let (url, _) = serve(vec![named(&[
        (s, d.into()),
        (
            "content_block_start",
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_1","name":"run_command","input":{"command":"ls"}}}"#.into(),
        ),
        ("content_block_stop", r#"{"type":"content_block_stop","index":0}"#.into()),
        (
            "message_delta",
            r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":3}}"#.into(),
        ),
        ("message_stop", r#"{"type":"message_stop"}"#.into()),
    ])])
    .await;
    let provider = AnthropicProvider::new(&config(&url)).unwrap();
    let events = collect(&provider, hello()).await;
    assert_eq!(
        events[0],
        Ok(ProviderEvent::ToolCall(ToolCall {
            call_id: "toolu_1".into(),
            tool: "run_command".into(),
            input: json!({"command": "ls"}),
        }))
    );
}

#[tokio::test]
async fn r4_15_thinking_and_signatures_count_against_the_answers_limit() {
    let thinking = |index: u32| {
        (
            "content_block_start",
            format!(
                r#"{{"type":"content_block_start","index":{index},"content_block":{{"type":"thinking","thinking":""}}}}"#
            ),
        )
    };
    let (s, d) = start();
    // One block, with a signature that grows without end in 400-byte deltas.
    let mut endless_signature = vec![(s, d.to_string()), thinking(0)];
    endless_signature.extend(std::iter::repeat_n(
        delta(
            0,
            json!({"type": "signature_delta", "signature": "s".repeat(400)}),
        ),
        10,
    ));
    // Two blocks of thinking, each within the limit, and some text: too much together.
    let mut two_blocks = vec![(s, d.to_string())];
    for index in 0..2 {
        two_blocks.push(thinking(index));
        two_blocks.push(delta(
            index,
            json!({"type": "thinking_delta", "thinking": "t".repeat(700)}),
        ));
        two_blocks.push((
            "content_block_stop",
            format!(r#"{{"type":"content_block_stop","index":{index}}}"#),
        ));
    }
    for events in [endless_signature, two_blocks] {
        let (url, _) = serve(vec![named(&events)]).await;
        let mut config = config(&url);
        config.max_answer_bytes = 1024;
        let provider = AnthropicProvider::new(&config).unwrap();
        let error = collect(&provider, hello())
            .await
            .pop()
            .unwrap()
            .unwrap_err();
        assert!(
            error.message.contains("larger than 1024 bytes") && !error.retryable,
            "{}",
            error.message
        );
    }
}

#[tokio::test]
async fn a_key_sent_back_in_a_signature_or_redacted_thinking_is_scrubbed() {
    let key = std::env::var("CARGO_PKG_NAME").unwrap();
    let (s, d) = start();
    let (url, _) = serve(vec![named(&[
        (s, d.into()),
        (
            "content_block_start",
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}"#.into(),
        ),
        delta(0, json!({"type": "thinking_delta", "thinking": "hm"})),
        delta(0, json!({"type": "signature_delta", "signature": format!("sig-{key}-sig")})),
        ("content_block_stop", r#"{"type":"content_block_stop","index":0}"#.into()),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 1,
                   "content_block": {"type": "redacted_thinking", "data": format!("x{key}x")}})
            .to_string(),
        ),
        ("content_block_stop", r#"{"type":"content_block_stop","index":1}"#.into()),
        (
            "message_delta",
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":3}}"#.into(),
        ),
        ("message_stop", r#"{"type":"message_stop"}"#.into()),
    ])])
    .await;
    let (provider, _) = keyed(&url);
    let events = collect(&provider, hello()).await;
    assert_eq!(
        events[..2],
        [
            Ok(ProviderEvent::Reasoning(Reasoning {
                text: "hm".into(),
                signature: Some("sig-<redacted>-sig".into()),
                redacted: None,
            })),
            Ok(ProviderEvent::Reasoning(Reasoning {
                text: String::new(),
                signature: None,
                redacted: Some("x<redacted>x".into()),
            })),
        ]
    );
}

#[test]
fn reasoning_without_a_signature_is_not_sent_back() {
    let provider = AnthropicProvider::new(&config("http://127.0.0.1:9")).unwrap();
    // A session that ran on Ollama first: its thinking has no signature.
    let body = provider.body(&request(vec![
        ChatMessage::User("hi".into()),
        ChatMessage::Assistant {
            text: "Hello.".into(),
            tool_calls: vec![],
            reasoning: vec![
                Reasoning {
                    text: "local thoughts".into(),
                    ..Reasoning::default()
                },
                Reasoning {
                    text: "empty".into(),
                    signature: Some(String::new()),
                    redacted: None,
                },
            ],
        },
        ChatMessage::Assistant {
            text: String::new(),
            tool_calls: vec![],
            reasoning: vec![Reasoning {
                text: "only thoughts".into(),
                ..Reasoning::default()
            }],
        },
        ChatMessage::User("again".into()),
    ]));
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "Hello."}]},
            {"role": "user", "content": [
                {"type": "text", "text": "again", "cache_control": {"type": "ephemeral"}}
            ]}
        ])
    );
}

#[test]
fn a_request_without_tools_tells_the_calls_and_results_as_text() {
    let provider = AnthropicProvider::new(&config("http://127.0.0.1:9")).unwrap();
    let mut compaction = request(vec![
        ChatMessage::System("sys".into()),
        ChatMessage::User("list it".into()),
        ChatMessage::Assistant {
            text: "Looking.".into(),
            tool_calls: vec![ToolCall {
                call_id: "toolu_1".into(),
                tool: "list_dir".into(),
                input: json!({"path": "."}),
            }],
            reasoning: vec![],
        },
        ChatMessage::ToolResult {
            call_id: "toolu_1".into(),
            tool: "list_dir".into(),
            content: "a.txt".into(),
            is_error: false,
        },
        ChatMessage::User("Summarise.".into()),
    ]);
    compaction.purpose = Purpose::Compaction;
    compaction.tools = Vec::new();
    let body = provider.body(&compaction);
    // The API refuses tool_use and tool_result blocks in a request without tools.
    assert_eq!(body.get("tools"), None);
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "list it"}]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Looking.\n\n[called list_dir with {\"path\":\".\"}]"}
            ]},
            {"role": "user", "content": [
                {"type": "text", "text": "[result of list_dir: a.txt]"},
                {"type": "text", "text": "Summarise.", "cache_control": {"type": "ephemeral"}}
            ]}
        ])
    );
    // With tools, the same conversation keeps its blocks.
    compaction.tools = request(vec![]).tools;
    let body = provider.body(&compaction);
    assert_eq!(body["messages"][1]["content"][1]["type"], "tool_use");
    assert_eq!(body["messages"][2]["content"][0]["type"], "tool_result");
}

/// One step's call and its result, as a session's history holds them.
fn called(id: &str, command: &str) -> [ChatMessage; 2] {
    [
        ChatMessage::Assistant {
            text: String::new(),
            tool_calls: vec![ToolCall {
                call_id: id.into(),
                tool: "run_command".into(),
                input: json!({"command": command}),
            }],
            reasoning: vec![],
        },
        ChatMessage::ToolResult {
            call_id: id.into(),
            tool: "run_command".into(),
            content: format!("ran {command}"),
            is_error: false,
        },
    ]
}

#[test]
fn r4_18_call_ids_from_other_providers_are_sent_valid_and_unique() {
    let provider = AnthropicProvider::new(&config("http://127.0.0.1:9")).unwrap();
    // A session that ran on Ollama (ids invented per step, so repeated) and on an
    // OpenAI-compatible server (ids with characters the Messages API refuses).
    let mut messages = vec![ChatMessage::User("hi".into())];
    messages.extend(called("call_0", "one"));
    messages.extend(called("call_0", "two"));
    messages.extend(called("functions.run_command:0", "three"));
    messages.extend(called("functions_run_command_0", "four"));
    messages.extend(called("call_0", "five"));
    messages.push(ChatMessage::User("next".into()));
    let body = provider.body(&request(messages));
    let sent: Vec<(String, String)> = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().unwrap().clone())
        .filter_map(|block| match block["type"].as_str().unwrap() {
            "tool_use" => Some((
                format!("use {}", block["input"]["command"].as_str().unwrap()),
                block["id"].as_str().unwrap().to_string(),
            )),
            "tool_result" => Some((
                format!("result {}", block["content"].as_str().unwrap()),
                block["tool_use_id"].as_str().unwrap().to_string(),
            )),
            _ => None,
        })
        .collect();
    let pair = |what: &str, id: &str| (what.to_string(), id.to_string());
    assert_eq!(
        sent,
        vec![
            pair("use one", "call_0"),
            pair("result ran one", "call_0"),
            pair("use two", "call_0_2"),
            pair("result ran two", "call_0_2"),
            pair("use three", "functions_run_command_0"),
            pair("result ran three", "functions_run_command_0"),
            pair("use four", "functions_run_command_0_2"),
            pair("result ran four", "functions_run_command_0_2"),
            pair("use five", "call_0_3"),
            pair("result ran five", "call_0_3"),
        ]
    );
}

#[test]
fn r4_18_no_text_block_of_whitespace_alone_is_sent() {
    let provider = AnthropicProvider::new(&config("http://127.0.0.1:9")).unwrap();
    let [call, result] = called("toolu_1", "true");
    let ChatMessage::Assistant {
        tool_calls,
        reasoning,
        ..
    } = call
    else {
        unreachable!()
    };
    let body = provider.body(&request(vec![
        ChatMessage::System("sys".into()),
        ChatMessage::User("hi".into()),
        // A model that streamed a blank line before its call.
        ChatMessage::Assistant {
            text: "\n\n".into(),
            tool_calls,
            reasoning,
        },
        result,
        ChatMessage::Assistant {
            text: "Done.".into(),
            tool_calls: vec![],
            reasoning: vec![],
        },
        // A prompt of spaces, answered with whitespace alone.
        ChatMessage::User("   ".into()),
        ChatMessage::Assistant {
            text: " \n".into(),
            tool_calls: vec![],
            reasoning: vec![],
        },
        ChatMessage::User("again".into()),
    ]));
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "run_command",
                 "input": {"command": "true"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ran true"}
            ]},
            {"role": "assistant", "content": [{"type": "text", "text": "Done."}]},
            {"role": "user", "content": [
                {"type": "text", "text": "(empty message)"},
                {"type": "text", "text": "again", "cache_control": {"type": "ephemeral"}}
            ]}
        ])
    );
}

#[test]
fn r4_18_a_tool_result_of_whitespace_alone_is_sent_as_no_output() {
    let provider = AnthropicProvider::new(&config("http://127.0.0.1:9")).unwrap();
    let [call, _] = called("toolu_1", "true");
    let body = provider.body(&request(vec![
        ChatMessage::User("hi".into()),
        call,
        ChatMessage::ToolResult {
            call_id: "toolu_1".into(),
            tool: "run_command".into(),
            content: "\n".into(),
            is_error: false,
        },
    ]));
    assert_eq!(
        body["messages"][2]["content"][0]["content"],
        json!("(no output)"),
        "{body}"
    );
}
