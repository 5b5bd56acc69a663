//! The scripted provider: offline and deterministic. Step *k* of a session answers
//! with entry *k* of a TOML script, where *k* is the number of assistant messages the
//! session already has — so a step after a crash gets the next entry, never a replay.
//! Past the end it answers with the last entry.

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use crate::message::{Finish, Usage};
use crate::provider::{
    ChatMessage, Provider, ProviderError, ProviderEvent, ProviderRequest, ProviderStream, Purpose,
    ToolCall,
};

/// The demo script served when nothing is configured.
pub const DEMO_SCRIPT: &str = include_str!("../../../assets/demo.toml");

/// A parsed script.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    #[serde(rename = "step")]
    pub steps: Vec<Entry>,
}

/// One answer.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// Streamed chunk by chunk.
    #[serde(default)]
    pub text: Vec<String>,
    /// Pause before each chunk.
    #[serde(default)]
    pub delay_ms: u64,
    #[serde(default)]
    pub tool_calls: Vec<ScriptedToolCall>,
    /// Defaults to `tool-calls` when there are tool calls, else `stop`.
    #[serde(default)]
    pub finish: Option<Finish>,
    /// Fail the step with this message after the text (a provider error).
    #[serde(default)]
    pub error: Option<String>,
}

/// A tool call a script step makes.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedToolCall {
    pub tool: String,
    #[serde(default = "empty_object")]
    pub input: Value,
}

fn empty_object() -> Value {
    Value::Object(Default::default())
}

impl Script {
    /// Parses a script's TOML.
    pub fn parse(text: &str) -> Result<Script, String> {
        let script: Script =
            toml::from_str(text).map_err(|e| e.to_string().trim_end().replace('\n', " "))?;
        if script.steps.is_empty() {
            return Err("the script has no [[step]] entries".into());
        }
        Ok(script)
    }

    /// Reads and parses a script file.
    pub fn load(path: &Path) -> Result<Script, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read script {}: {e}", path.display()))?;
        Script::parse(&text).map_err(|e| format!("script {}: {e}", path.display()))
    }

    /// The built-in demo script (`assets/demo.toml`).
    pub fn demo() -> Script {
        Script::parse(DEMO_SCRIPT).expect("the demo script parses")
    }

    /// Entry `k`, or the last one past the end.
    pub fn entry(&self, k: usize) -> &Entry {
        &self.steps[k.min(self.steps.len() - 1)]
    }
}

/// Answers from a [`Script`].
#[derive(Debug, Clone)]
pub struct ScriptedProvider {
    script: Script,
    model: String,
}

impl ScriptedProvider {
    /// A provider answering from `script`, reporting `model`.
    pub fn new(script: Script, model: String) -> ScriptedProvider {
        ScriptedProvider { script, model }
    }
}

impl Provider for ScriptedProvider {
    fn name(&self) -> &str {
        "scripted"
    }

    /// Only its own script: another "model" is another script, which this process
    /// does not have.
    fn with_model(&self, model: &str) -> Option<std::sync::Arc<dyn Provider>> {
        (model == self.model).then(|| std::sync::Arc::new(self.clone()) as _)
    }

    fn model(&self) -> &str {
        &self.model
    }

    fn stream(&self, request: ProviderRequest) -> ProviderStream {
        if request.purpose == Purpose::Compaction {
            let summary = summarise(&request.messages);
            return ProviderStream::spawn(|tx| async move {
                tx.send(Ok(ProviderEvent::TextDelta(summary))).await;
                tx.send(Ok(ProviderEvent::Finish(Finish::Stop))).await;
            });
        }
        let entry = self.script.entry(request.step_index).clone();
        let k = request.step_index;
        ProviderStream::spawn(move |tx| async move {
            let mut output = 0;
            for chunk in entry.text {
                if entry.delay_ms > 0 {
                    tokio::time::sleep(Duration::from_millis(entry.delay_ms)).await;
                }
                output += chunk.len();
                if !tx.send(Ok(ProviderEvent::TextDelta(chunk))).await {
                    return;
                }
            }
            if let Some(error) = entry.error {
                tx.send(Err(ProviderError::fatal(error))).await;
                return;
            }
            let has_calls = !entry.tool_calls.is_empty();
            for (i, call) in entry.tool_calls.into_iter().enumerate() {
                output += call.input.to_string().len();
                let call = ToolCall {
                    call_id: format!("call_{k}_{i}"),
                    tool: call.tool,
                    input: call.input,
                };
                tx.send(Ok(ProviderEvent::ToolCall(call))).await;
            }
            let input_tokens = crate::provider::context::estimate_tokens(&request.messages) as u64;
            tx.send(Ok(ProviderEvent::Usage(Usage {
                input_tokens,
                output_tokens: (output as u64).div_ceil(4),
                ..Usage::default()
            })))
            .await;
            let finish = entry.finish.unwrap_or(if has_calls {
                Finish::ToolCalls
            } else {
                Finish::Stop
            });
            tx.send(Ok(ProviderEvent::Finish(finish))).await;
        })
    }
}

/// A deterministic summary for compaction: the user's requests, in order.
fn summarise(messages: &[ChatMessage]) -> String {
    let asks: Vec<&str> = messages
        .iter()
        .filter_map(|m| match m {
            ChatMessage::User(t) if !t.starts_with("Summarise the conversation") => {
                Some(t.as_str())
            }
            _ => None,
        })
        .collect();
    let mut summary = format!("The user asked, in order: {}.", asks.join(" | "));
    summary.truncate(2_000);
    summary
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn request(k: usize) -> ProviderRequest {
        ProviderRequest {
            session_id: "ses_1".into(),
            purpose: Purpose::Step,
            step_index: k,
            messages: vec![ChatMessage::User("hi".into())],
            tools: vec![],
        }
    }

    async fn collect(provider: &ScriptedProvider, k: usize) -> Vec<ProviderEvent> {
        let mut stream = provider.stream(request(k));
        let mut out = Vec::new();
        while let Some(event) = stream.next().await {
            out.push(event.unwrap());
        }
        out
    }

    #[tokio::test]
    async fn entry_k_answers_step_k_and_the_last_repeats() {
        let script = Script::parse(
            r#"
            [[step]]
            text = ["Look", "ing."]
            tool_calls = [{ tool = "run_command", input = { command = "ls" } }]
            [[step]]
            text = ["Done."]
            "#,
        )
        .unwrap();
        let provider = ScriptedProvider::new(script, "demo".into());
        let first = collect(&provider, 0).await;
        assert_eq!(
            first[..3].to_vec(),
            vec![
                ProviderEvent::TextDelta("Look".into()),
                ProviderEvent::TextDelta("ing.".into()),
                ProviderEvent::ToolCall(ToolCall {
                    call_id: "call_0_0".into(),
                    tool: "run_command".into(),
                    input: json!({"command": "ls"}),
                }),
            ]
        );
        assert_eq!(
            first.last(),
            Some(&ProviderEvent::Finish(Finish::ToolCalls))
        );
        for k in [1, 2, 7] {
            let events = collect(&provider, k).await;
            assert_eq!(events[0], ProviderEvent::TextDelta("Done.".into()));
            assert_eq!(events.last(), Some(&ProviderEvent::Finish(Finish::Stop)));
        }
    }

    #[test]
    fn the_demo_script_parses_and_unknown_keys_are_named() {
        assert!(Script::demo().steps.len() >= 2);
        let err = Script::parse("[[step]]\ntxt = [\"x\"]\n").unwrap_err();
        assert!(err.contains("unknown field `txt`"), "{err}");
        assert!(Script::parse("").unwrap_err().contains("step"));
    }
}
