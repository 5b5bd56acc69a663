//! The `openai` provider against a fake SSE server the test starts on 127.0.0.1.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::json;

use super::*;
use crate::provider::{ProviderEvent, Purpose, ToolSpec};

pub(crate) use crate::provider::fake::{Reply, Seen};

/// The fake server, with the `/v1` an OpenAI-compatible root has.
pub(crate) async fn serve(replies: Vec<Reply>) -> (String, Arc<Mutex<Seen>>) {
    let (root, seen) = crate::provider::fake::serve(replies).await;
    (format!("{root}/v1"), seen)
}

pub(crate) fn config(url: &str) -> ProviderConfig {
    ProviderConfig {
        name: "openai".into(),
        base_url: Some(url.to_string()),
        model: Some("tiny".into()),
        request_timeout_ms: 5_000,
        ..ProviderConfig::default()
    }
}

fn request() -> ProviderRequest {
    ProviderRequest {
        session_id: "ses_1".into(),
        purpose: Purpose::Step,
        step_index: 0,
        messages: vec![
            ChatMessage::System("sys".into()),
            ChatMessage::User("hi".into()),
        ],
        tools: vec![ToolSpec {
            name: "run_command".into(),
            description: "run".into(),
            parameters: json!({"type": "object"}),
        }],
    }
}

async fn collect(provider: &OpenAiProvider) -> Vec<Result<ProviderEvent, ProviderError>> {
    let mut stream = provider.stream(request());
    let mut out = Vec::new();
    while let Some(item) = stream.next().await {
        out.push(item);
    }
    out
}

#[tokio::test]
async fn streamed_text_and_fragmented_tool_calls_are_assembled() {
    let (url, seen) = serve(vec![Reply::sse(&[
        r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":"Let "}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"me."}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","function":{"name":"run_","arguments":"{\"comm"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","function":{"name":"list_dir","arguments":"{\"path\""}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"command","arguments":"and\": \"ls\"}"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":": \".\"}"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":7}}"#,
        "[DONE]",
    ])])
    .await;
    let provider = OpenAiProvider::new(&config(&url)).unwrap();
    let events: Vec<ProviderEvent> = collect(&provider)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        events,
        vec![
            ProviderEvent::TextDelta("Let ".into()),
            ProviderEvent::TextDelta("me.".into()),
            ProviderEvent::ToolCall(ToolCall {
                call_id: "call_a".into(),
                tool: "run_command".into(),
                input: json!({"command": "ls"})
            }),
            ProviderEvent::ToolCall(ToolCall {
                call_id: "call_b".into(),
                tool: "list_dir".into(),
                input: json!({"path": "."})
            }),
            ProviderEvent::Usage(Usage {
                input_tokens: 12,
                output_tokens: 7,
                ..Usage::default()
            }),
            ProviderEvent::Finish(Finish::ToolCalls),
        ]
    );
    let request = seen.lock().unwrap().requests[0].clone();
    assert!(
        request.starts_with("POST /v1/chat/completions HTTP/1.1"),
        "{request}"
    );
    let body: Value =
        serde_json::from_str(&request[request.find("\r\n\r\n").unwrap() + 4..]).unwrap();
    assert_eq!(body["model"], "tiny");
    assert_eq!(body["stream"], true);
    assert_eq!(
        body["messages"],
        json!([{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}])
    );
    assert_eq!(body["tools"][0]["function"]["name"], "run_command");
}

#[tokio::test]
async fn a_malformed_chunk_is_a_readable_error() {
    let (url, _) = serve(vec![Reply::sse(&[
        r#"{"choices":[{"delta":{"content":"ok"}}]}"#,
        "{not json",
    ])])
    .await;
    let provider = OpenAiProvider::new(&config(&url)).unwrap();
    let items = collect(&provider).await;
    assert_eq!(items[0], Ok(ProviderEvent::TextDelta("ok".into())));
    let error = items[1].clone().unwrap_err();
    assert!(!error.retryable);
    assert!(error.message.contains("malformed chunk"), "{error}");
}

#[tokio::test]
async fn a_stream_cut_off_midway_is_an_error_not_an_answer() {
    let (url, _) = serve(vec![Reply::sse(&[
        r#"{"choices":[{"delta":{"content":"half"}}]}"#,
    ])])
    .await;
    let provider = OpenAiProvider::new(&config(&url)).unwrap();
    let items = collect(&provider).await;
    assert_eq!(items[0], Ok(ProviderEvent::TextDelta("half".into())));
    let error = items[1].clone().unwrap_err();
    assert!(
        error
            .message
            .contains("ended before the answer was complete"),
        "{error}"
    );
}

#[tokio::test]
async fn rate_limits_and_server_errors_are_retryable_client_errors_are_not() {
    for (status, retryable) in [
        (429, true),
        (500, true),
        (503, true),
        (400, false),
        (401, false),
    ] {
        let (url, _) = serve(vec![Reply::status(
            status,
            r#"{"error":{"message":"nope"}}"#,
        )])
        .await;
        let provider = OpenAiProvider::new(&config(&url)).unwrap();
        let items = collect(&provider).await;
        let error = items[0].clone().unwrap_err();
        assert_eq!(error.retryable, retryable, "HTTP {status}");
        assert!(error.message.contains(&format!("HTTP {status}")), "{error}");
        assert!(error.message.contains("nope"), "{error}");
    }
    let provider = OpenAiProvider::new(&config("http://127.0.0.1:9")).unwrap();
    let error = collect(&provider).await[0].clone().unwrap_err();
    assert!(
        error.retryable,
        "a refused connection should be retryable: {error}"
    );
}

#[tokio::test]
async fn an_api_key_is_sent_as_a_bearer_token() {
    let (url, seen) = serve(vec![Reply::sse(&[
        r#"{"choices":[{"delta":{"content":"x"},"finish_reason":"stop"}]}"#,
        "[DONE]",
    ])])
    .await;
    let mut config = config(&url);
    // A variable every test process has, so the test never has to set one.
    config.api_key_env = Some("PATH".into());
    let key = std::env::var("PATH").unwrap();
    let provider = OpenAiProvider::new(&config).unwrap();
    collect(&provider).await;
    let request = seen.lock().unwrap().requests[0].clone();
    assert!(
        request.to_ascii_lowercase().contains(&format!(
            "authorization: bearer {}",
            key.to_ascii_lowercase()
        )),
        "{request}"
    );
    config.api_key_env = Some("STEWARD_TEST_UNSET_VARIABLE".into());
    assert!(
        OpenAiProvider::new(&config)
            .unwrap_err()
            .contains("STEWARD_TEST_UNSET_VARIABLE")
    );
}

#[tokio::test]
async fn an_api_key_echoed_by_the_server_never_reaches_an_error_or_debug_output() {
    // The variable's value stands in for a key (the test never sets variables).
    let key = std::env::var("PATH").unwrap();
    let (url, _) = serve(vec![Reply::status(
        401,
        &format!("{{\"error\": \"bad key: Bearer {key}\"}}"),
    )])
    .await;
    let mut config = config(&url);
    config.api_key_env = Some("PATH".into());
    let provider = OpenAiProvider::new(&config).unwrap();
    let events = collect(&provider).await;
    let Some(Err(error)) = events.last() else {
        panic!("expected an error: {events:?}")
    };
    assert!(error.message.contains("401"), "{}", error.message);
    assert!(error.message.contains("<redacted>"), "{}", error.message);
    assert!(
        !error.message.contains(&key),
        "the key leaked: {}",
        error.message
    );
    assert!(!format!("{provider:?}").contains(&key));
}

#[tokio::test]
async fn an_api_key_streamed_back_is_scrubbed_even_split_across_chunks() {
    let key = std::env::var("PATH").unwrap();
    let (head, tail) = key.split_at(key.len() / 2);
    let text = |t: &str| serde_json::json!({"choices": [{"delta": {"content": t}}]}).to_string();
    let call = serde_json::json!({"choices": [{"delta": {"tool_calls": [
        {"index": 0, "id": "c1", "function": {"name": "run_command",
         "arguments": format!("{{\"command\": \"echo {key}\"}}")}}]}, "finish_reason": "tool_calls"}]})
    .to_string();
    let chunks = [
        text("the key is "),
        text(head),
        text(tail),
        text(" and more"),
        call,
    ];
    let mut events: Vec<&str> = chunks.iter().map(String::as_str).collect();
    events.push("[DONE]");
    let (url, _) = serve(vec![Reply::sse(&events)]).await;
    let mut config = config(&url);
    config.api_key_env = Some("PATH".into());
    let provider = OpenAiProvider::new(&config).unwrap();
    let mut streamed = String::new();
    let mut input = serde_json::Value::Null;
    for event in collect(&provider).await {
        match event.unwrap() {
            ProviderEvent::TextDelta(t) => streamed.push_str(&t),
            ProviderEvent::ToolCall(c) => input = c.input,
            _ => {}
        }
    }
    assert_eq!(streamed, "the key is <redacted> and more");
    assert_eq!(input, serde_json::json!({"command": "echo <redacted>"}));
}

#[tokio::test]
async fn dropping_the_stream_hangs_up_on_a_slow_server() {
    let slow = Reply {
        status: 200,
        headers: vec![("Content-Type".into(), "text/event-stream".into())],
        pieces: (0..100)
            .map(|i| format!("data: {{\"choices\":[{{\"delta\":{{\"content\":\"{i} \"}}}}]}}\n\n"))
            .collect(),
        pause: Duration::from_millis(50),
    };
    let (url, seen) = serve(vec![slow]).await;
    let provider = OpenAiProvider::new(&config(&url)).unwrap();
    let mut stream = provider.stream(request());
    assert!(matches!(
        stream.next().await,
        Some(Ok(ProviderEvent::TextDelta(_)))
    ));
    drop(stream);
    tokio::time::timeout(Duration::from_secs(5), async {
        while seen.lock().unwrap().hangups == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the server never saw the hang-up");
}

/// Opt-in: only compiled when `STEWARD_TEST_OPENAI_URL` is set at build time
/// (e.g. `../shared/tools/real-llm-server`), never in CI.
#[cfg(real_llm)]
#[tokio::test]
async fn a_real_openai_compatible_server_answers_a_step() {
    let url = env!("STEWARD_TEST_OPENAI_URL");
    let mut config = config(url);
    config.model = std::env::var("STEWARD_TEST_OPENAI_MODEL")
        .ok()
        .or(Some("default".into()));
    config.request_timeout_ms = 120_000;
    let provider = OpenAiProvider::new(&config).unwrap();
    let mut request = request();
    request.tools.clear();
    request.messages = vec![ChatMessage::User("Say hello in one word.".into())];
    let mut stream = provider.stream(request);
    let (mut text, mut finished) = (String::new(), false);
    while let Some(item) = stream.next().await {
        match item.unwrap() {
            ProviderEvent::TextDelta(t) => text.push_str(&t),
            ProviderEvent::Finish(_) => finished = true,
            _ => {}
        }
    }
    assert!(finished && !text.trim().is_empty(), "{text:?}");
}

/// A reply that sends `pieces` of `piece` bytes each, with no newline at all.
fn endless(piece: usize, pieces: usize) -> Reply {
    Reply {
        status: 200,
        headers: vec![("Content-Type".into(), "text/event-stream".into())],
        pieces: std::iter::once("data: ".to_string())
            .chain(std::iter::repeat_n("x".repeat(piece), pieces))
            .collect(),
        pause: Duration::ZERO,
    }
}

fn the_error(events: &[Result<ProviderEvent, ProviderError>]) -> ProviderError {
    events
        .iter()
        .find_map(|e| e.as_ref().err().cloned())
        .expect("the stream ended with an error")
}

#[tokio::test]
async fn r4_15_a_line_that_never_ends_stops_the_step_at_the_event_limit() {
    // 64 MiB offered, without a newline; the limit is 64 KiB.
    let (url, seen) = serve(vec![endless(64 << 10, 1024)]).await;
    let mut cfg = config(&url);
    cfg.max_event_bytes = 64 << 10;
    let provider = OpenAiProvider::new(&cfg).unwrap();
    let events = collect(&provider).await;
    let error = the_error(&events);
    assert!(!error.retryable);
    assert!(
        error.message.contains("larger than 65536 bytes")
            && error.message.contains("max_event_bytes"),
        "{}",
        error.message
    );
    // The client stopped reading long before the server was done.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(seen.lock().unwrap().hangups, 1);
}

#[tokio::test]
async fn r4_15_an_endless_answer_or_tool_call_stops_the_step_at_its_limit() {
    let chunk = format!(
        r#"{{"choices":[{{"index":0,"delta":{{"content":"{}"}}}}]}}"#,
        "a".repeat(1_000)
    );
    let answer: Vec<&str> = std::iter::repeat_n(chunk.as_str(), 100).collect();
    let (url, _) = serve(vec![Reply::sse(&answer)]).await;
    let mut cfg = config(&url);
    cfg.max_answer_bytes = 10_000;
    let error = the_error(&collect(&OpenAiProvider::new(&cfg).unwrap()).await);
    assert!(
        error.message.contains("max_answer_bytes"),
        "{}",
        error.message
    );

    let fragment = format!(
        r#"{{"choices":[{{"index":0,"delta":{{"tool_calls":[{{"index":0,"id":"c","function":{{"name":"write_file","arguments":"{}"}}}}]}}}}]}}"#,
        "b".repeat(1_000)
    );
    let call: Vec<&str> = std::iter::repeat_n(fragment.as_str(), 100).collect();
    let (url, _) = serve(vec![Reply::sse(&call)]).await;
    let mut cfg = config(&url);
    cfg.max_tool_arguments_bytes = 10_000;
    let error = the_error(&collect(&OpenAiProvider::new(&cfg).unwrap()).await);
    assert!(
        error.message.contains("max_tool_arguments_bytes"),
        "{}",
        error.message
    );
}

#[tokio::test]
async fn r4_15_an_error_body_is_read_only_up_to_its_limit() {
    let (url, _) = serve(vec![Reply::status(400, &"e".repeat(1 << 20))]).await;
    let mut cfg = config(&url);
    cfg.max_error_body_bytes = 1_000;
    let error = the_error(&collect(&OpenAiProvider::new(&cfg).unwrap()).await);
    assert!(error.message.contains("HTTP 400"), "{}", error.message);
    assert!(error.message.len() < 2_000, "{}", error.message.len());
}

#[tokio::test]
async fn r4_15_bytes_that_trickle_without_forming_an_event_time_out() {
    let trickle = Reply {
        status: 200,
        headers: vec![("Content-Type".into(), "text/event-stream".into())],
        pieces: vec![
            "data: ".into(),
            "x".into(),
            "x".into(),
            "x".into(),
            "x".into(),
        ],
        pause: Duration::from_millis(200),
    };
    let (url, _) = serve(vec![trickle]).await;
    let mut cfg = config(&url);
    cfg.request_timeout_ms = 500;
    let started = std::time::Instant::now();
    let error = the_error(&collect(&OpenAiProvider::new(&cfg).unwrap()).await);
    assert!(
        error.message.contains("no complete event"),
        "{}",
        error.message
    );
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn text_streamed_before_a_stream_breaks_reaches_the_step_with_a_key_set() {
    let (url, _) = serve(vec![Reply::sse(&[
        r#"{"choices":[{"index":0,"delta":{"content":"Half"}}]}"#,
        r#"{"error":{"type":"server_error","message":"boom"}}"#,
    ])])
    .await;
    let mut config = config(&url);
    config.api_key_env = Some("PATH".into());
    let events = collect(&OpenAiProvider::new(&config).unwrap()).await;
    assert_eq!(events[0], Ok(ProviderEvent::TextDelta("Half".into())));
    assert!(events[1].is_err(), "{events:?}");
}

#[test]
fn call_ids_repeated_across_the_history_are_sent_unique() {
    let provider = OpenAiProvider::new(&config("http://127.0.0.1:9/v1")).unwrap();
    let call = |id: &str, command: &str| {
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
    };
    let mut request = request();
    // Ollama invents `call_0` afresh each step; another server's ids go as they are.
    request.messages.extend(call("call_0", "one"));
    request.messages.extend(call("call_0", "two"));
    request
        .messages
        .extend(call("functions.run_command:0", "three"));
    let body = provider.body(&request);
    let ids: Vec<&str> = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| {
            m["tool_call_id"]
                .as_str()
                .or_else(|| m["tool_calls"][0]["id"].as_str())
        })
        .collect();
    assert_eq!(
        ids,
        [
            "call_0",
            "call_0",
            "call_0_2",
            "call_0_2",
            "functions.run_command:0",
            "functions.run_command:0"
        ]
    );
}
