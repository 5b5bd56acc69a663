//! The `ollama` provider against recorded `/api/chat` streams (newline-delimited
//! JSON), served by the fake server on 127.0.0.1.

use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::json;

use super::*;
use crate::provider::fake::{Reply, serve};
use crate::provider::{ErrorKind, Purpose, ToolSpec};

fn config(url: &str) -> ProviderConfig {
    ProviderConfig {
        name: "ollama".into(),
        base_url: Some(url.to_string()),
        model: Some("qwen-test".into()),
        request_timeout_ms: 5_000,
        keep_alive: Some("10m".into()),
        ..ProviderConfig::default()
    }
}

fn request(messages: Vec<ChatMessage>) -> ProviderRequest {
    ProviderRequest {
        session_id: "ses_1".into(),
        purpose: Purpose::Step,
        step_index: 0,
        messages,
        tools: vec![ToolSpec {
            name: "run_command".into(),
            description: "run".into(),
            parameters: json!({"type": "object"}),
        }],
    }
}

fn hello() -> Vec<ChatMessage> {
    vec![
        ChatMessage::System("sys".into()),
        ChatMessage::User("hi".into()),
    ]
}

async fn collect(
    provider: &OllamaProvider,
    messages: Vec<ChatMessage>,
) -> Vec<Result<ProviderEvent, ProviderError>> {
    let mut stream = provider.stream(request(messages));
    let mut out = Vec::new();
    while let Some(item) = stream.next().await {
        out.push(item);
    }
    out
}

fn show(context_length: u64) -> Reply {
    Reply::status(
        200,
        &json!({"model_info": {"general.architecture": "qwen2", "qwen2.context_length": context_length}})
            .to_string(),
    )
}

const TEXT_AND_TOOL_CALL: &[&str] = &[
    r#"{"model":"qwen-test","created_at":"2026-12-01T12:00:00Z","message":{"role":"assistant","content":"Let me "},"done":false}"#,
    r#"{"model":"qwen-test","created_at":"2026-12-01T12:00:00Z","message":{"role":"assistant","content":"look."},"done":false}"#,
    r#"{"model":"qwen-test","created_at":"2026-12-01T12:00:01Z","message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"run_command","arguments":{"command":"ls"}}}]},"done":false}"#,
    r#"{"model":"qwen-test","created_at":"2026-12-01T12:00:01Z","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop","total_duration":1200000,"prompt_eval_count":40,"eval_count":12}"#,
];

#[tokio::test]
async fn r4_18_a_streamed_text_and_tool_call_turn_with_the_models_context_window() {
    let (url, seen) = serve(vec![show(32_768), Reply::ndjson(TEXT_AND_TOOL_CALL)]).await;
    let provider = OllamaProvider::new(&config(&url)).unwrap();
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
                call_id: "call_0".into(),
                tool: "run_command".into(),
                input: json!({"command": "ls"}),
            }),
            ProviderEvent::Usage(Usage {
                input_tokens: 40,
                output_tokens: 12,
                ..Usage::default()
            }),
            ProviderEvent::Finish(Finish::ToolCalls),
        ]
    );
    let seen = seen.lock().unwrap();
    assert!(seen.requests[0].starts_with("POST /api/show "));
    assert_eq!(seen.body(0), json!({"model": "qwen-test"}));
    assert!(seen.requests[1].starts_with("POST /api/chat "));
    let body = seen.body(1);
    assert_eq!(body["options"]["num_ctx"], 32_768);
    assert_eq!(body["keep_alive"], "10m");
    assert_eq!(body["stream"], true);
    assert_eq!(body["tools"][0]["function"]["name"], "run_command");
}

#[tokio::test]
async fn r4_18_the_context_window_is_at_least_8192_and_the_config_wins() {
    let (url, seen) = serve(vec![show(2048), Reply::ndjson(TEXT_AND_TOOL_CALL)]).await;
    let provider = OllamaProvider::new(&config(&url)).unwrap();
    collect(&provider, hello()).await;
    assert_eq!(seen.lock().unwrap().body(1)["options"]["num_ctx"], 8192);
    let (url, seen) = serve(vec![Reply::ndjson(TEXT_AND_TOOL_CALL)]).await;
    let mut config = config(&url);
    config.num_ctx = Some(16_384);
    let provider = OllamaProvider::new(&config).unwrap();
    collect(&provider, hello()).await;
    let seen = seen.lock().unwrap();
    assert_eq!(seen.requests.len(), 1, "no /api/show when num_ctx is set");
    assert_eq!(seen.body(0)["options"]["num_ctx"], 16_384);
}

#[tokio::test]
async fn r4_18_a_prompt_that_filled_the_window_is_reported_not_silently_cut() {
    let (url, _) = serve(vec![Reply::ndjson(&[
        r#"{"message":{"role":"assistant","content":"ok"},"done":false}"#,
        r#"{"message":{"role":"assistant","content":""},"done":true,"done_reason":"stop","prompt_eval_count":8192,"eval_count":1}"#,
    ])])
    .await;
    let mut config = config(&url);
    config.num_ctx = Some(8192);
    let provider = OllamaProvider::new(&config).unwrap();
    let events = collect(&provider, hello()).await;
    let warning = events
        .iter()
        .find_map(|e| match e {
            Ok(ProviderEvent::Warning(w)) => Some(w.clone()),
            _ => None,
        })
        .expect("a warning");
    assert!(
        warning.contains("filled the context window (num_ctx 8192)"),
        "{warning}"
    );
}

#[tokio::test]
async fn r4_18_an_error_line_or_status_is_the_steps_error() {
    let (url, _) = serve(vec![Reply::ndjson(&[
        r#"{"message":{"role":"assistant","content":"Half"},"done":false}"#,
        r#"{"error":"an error was encountered while running the model"}"#,
    ])])
    .await;
    let mut config = config(&url);
    config.num_ctx = Some(8192);
    let provider = OllamaProvider::new(&config).unwrap();
    let events = collect(&provider, hello()).await;
    assert_eq!(events[0], Ok(ProviderEvent::TextDelta("Half".into())));
    let error = events.last().unwrap().clone().unwrap_err();
    assert!(
        error
            .message
            .contains("an error was encountered while running the model"),
        "{}",
        error.message
    );
    let (url, _) = serve(vec![
        Reply::status(429, r#"{"error":"too many requests"}"#).header("retry-after", "3"),
    ])
    .await;
    let mut config = self::config(&url);
    config.num_ctx = Some(8192);
    let provider = OllamaProvider::new(&config).unwrap();
    let error = collect(&provider, hello())
        .await
        .pop()
        .unwrap()
        .unwrap_err();
    assert_eq!(error.kind, ErrorKind::RateLimited);
    assert_eq!(error.retry_after, Some(Duration::from_secs(3)));
    let (url, _) = serve(vec![Reply::status(
        404,
        r#"{"error":"model \"qwen-test\" not found, try pulling it first"}"#,
    )])
    .await;
    let mut config = self::config(&url);
    config.num_ctx = Some(8192);
    let provider = OllamaProvider::new(&config).unwrap();
    let error = collect(&provider, hello())
        .await
        .pop()
        .unwrap()
        .unwrap_err();
    assert!(!error.retryable);
    assert!(
        error.message.contains("try pulling it first"),
        "{}",
        error.message
    );
}

#[tokio::test]
async fn r4_18_a_recovered_call_is_answered_by_its_tool_result() {
    let (url, _) = serve(vec![Reply::ndjson(TEXT_AND_TOOL_CALL)]).await;
    let provider = OllamaProvider::new(&config(&url)).unwrap();
    let body = provider.body(
        &request(vec![
            ChatMessage::User("run it".into()),
            ChatMessage::Assistant {
                text: String::new(),
                tool_calls: vec![ToolCall {
                    call_id: "call_0".into(),
                    tool: "run_command".into(),
                    input: json!({"command": "sleep 300"}),
                }],
                reasoning: vec![],
            },
            ChatMessage::ToolResult {
                call_id: "call_0".into(),
                tool: "run_command".into(),
                content: "Error: Tool execution outcome unknown after server restart".into(),
                is_error: true,
            },
        ]),
        8192,
    );
    assert_eq!(
        body["messages"][1]["tool_calls"],
        json!([{"function": {"name": "run_command", "arguments": {"command": "sleep 300"}}}])
    );
    assert_eq!(
        body["messages"][2],
        json!({"role": "tool", "tool_name": "run_command",
               "content": "Error: Tool execution outcome unknown after server restart"})
    );
}

fn fixed(url: &str) -> ProviderConfig {
    let mut config = config(url);
    config.num_ctx = Some(8192);
    config
}

#[tokio::test]
async fn r4_15_bytes_that_never_form_a_record_time_out() {
    let first = r#"{"message":{"role":"assistant","content":"Hi"},"done":false}"#;
    // One byte a beat that never ends a line; blank lines; blanks without a newline.
    for trickle in ["x", "\n", " "] {
        let reply = Reply {
            pieces: std::iter::once(format!("{first}\n"))
                .chain(std::iter::repeat_n(trickle.to_string(), 20))
                .collect(),
            pause: Duration::from_millis(100),
            ..Reply::ndjson(&[])
        };
        let (url, _) = serve(vec![reply]).await;
        let mut config = fixed(&url);
        config.request_timeout_ms = 500;
        let provider = OllamaProvider::new(&config).unwrap();
        let started = std::time::Instant::now();
        let events = collect(&provider, hello()).await;
        assert_eq!(events[0], Ok(ProviderEvent::TextDelta("Hi".into())));
        let error = events.last().unwrap().clone().unwrap_err();
        assert_eq!(
            error.message, "the provider sent no complete event for 500 ms: the step was stopped",
            "{trickle:?}"
        );
        assert!(
            started.elapsed() < Duration::from_millis(1800),
            "{trickle:?}"
        );
    }
}

#[tokio::test]
async fn a_last_record_without_a_newline_ends_the_answer() {
    let reply = Reply {
        pieces: vec![
            "{\"message\":{\"role\":\"assistant\",\"content\":\"Done.\"},\"done\":false}\n".into(),
            "{\"message\":{\"role\":\"assistant\",\"content\":\"\"},\"done\":true,\"done_reason\":\"stop\",\"prompt_eval_count\":5,\"eval_count\":2}".into(),
        ],
        ..Reply::ndjson(&[])
    };
    let (url, _) = serve(vec![reply]).await;
    let provider = OllamaProvider::new(&fixed(&url)).unwrap();
    let events: Vec<ProviderEvent> = collect(&provider, hello())
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(events[0], ProviderEvent::TextDelta("Done.".into()));
    assert_eq!(events.last(), Some(&ProviderEvent::Finish(Finish::Stop)));
}

#[tokio::test]
async fn an_answer_stopped_at_the_window_says_so() {
    let (url, _) = serve(vec![Reply::ndjson(&[
        r#"{"message":{"role":"assistant","content":"A long"},"done":false}"#,
        r#"{"message":{"role":"assistant","content":""},"done":true,"done_reason":"length","prompt_eval_count":100,"eval_count":8000}"#,
    ])])
    .await;
    let provider = OllamaProvider::new(&fixed(&url)).unwrap();
    let events: Vec<ProviderEvent> = collect(&provider, hello())
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert!(
        events.contains(&ProviderEvent::Warning(
            "the answer stopped where the context window (num_ctx 8192) filled: raise `[provider] num_ctx` or let the conversation compact".into()
        )),
        "{events:?}"
    );
    assert_eq!(events.last(), Some(&ProviderEvent::Finish(Finish::Length)));
}

#[tokio::test]
async fn a_busy_server_before_any_output_is_overloaded_and_worth_another_try() {
    let (url, _) = serve(vec![Reply::ndjson(&[
        r#"{"error":"server busy, please try again.  maximum pending requests exceeded"}"#,
    ])])
    .await;
    let provider = OllamaProvider::new(&fixed(&url)).unwrap();
    let error = collect(&provider, hello())
        .await
        .pop()
        .unwrap()
        .unwrap_err();
    assert_eq!(error.kind, ErrorKind::Overloaded);
    assert!(error.retryable);
}

#[tokio::test]
async fn text_streamed_before_an_error_line_reaches_the_step_with_a_key_set() {
    let (url, _) = serve(vec![Reply::ndjson(&[
        r#"{"message":{"role":"assistant","content":"Half"},"done":false}"#,
        r#"{"error":"an error was encountered while running the model"}"#,
    ])])
    .await;
    let mut config = fixed(&url);
    // A variable cargo sets for every test process, so the test never sets one.
    config.api_key_env = Some("CARGO_PKG_NAME".into());
    let provider = OllamaProvider::new(&config).unwrap();
    let events = collect(&provider, hello()).await;
    assert_eq!(events[0], Ok(ProviderEvent::TextDelta("Half".into())));
    assert!(events[1].is_err(), "{events:?}");
}
