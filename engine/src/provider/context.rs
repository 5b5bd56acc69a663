//! Building a provider conversation from the transcript.
//!
//! The transcript is valid at every step boundary (protocol §3.4): every tool call has a
//! result, so the request is always well-formed. A compaction summary stands for
//! everything before it.

use crate::message::{MessageData, Part, PromptBlock, SyntheticKind, ToolStatus, UserData};
use crate::projection::MessageRow;
use crate::provider::{ChatMessage, ToolCall};

/// The system prompt every step starts with.
pub fn system_prompt(directory: &str) -> String {
    format!(
        "You are a coding agent run by Steward. You work in the directory {directory}. \
         Use the tools to inspect and change files and to run commands; relative paths \
         resolve against that directory. Be brief."
    )
}

/// What reading the files prompts link to gave, by URI: the text, or why it could
/// not be read (protocol §4.20).
pub type Linked = std::collections::HashMap<String, Result<String, String>>;

/// The conversation for the next request, from messages in transcript order. A
/// prompt's links stay the references its text has ([`conversation_with`] reads
/// them).
pub fn conversation(directory: &str, messages: &[MessageRow]) -> Vec<ChatMessage> {
    conversation_with(directory, messages, None)
}

/// The messages the next request is built from: those from the latest compaction
/// summary on.
fn sent(messages: &[MessageRow]) -> &[MessageRow] {
    let start = messages
        .iter()
        .rposition(
            |m| matches!(&m.data, MessageData::Synthetic(s) if s.kind == SyntheticKind::Compaction),
        )
        .unwrap_or(0);
    &messages[start..]
}

/// The URIs of the files the prompts of the next request link to, the newest
/// prompt's first (each prompt's in its order, each URI once): the order they are
/// read in, so that when their total is over what a request may hold, the files
/// left out are the oldest prompts' (protocol §4.20).
pub fn links(messages: &[MessageRow]) -> Vec<String> {
    let mut uris: Vec<String> = Vec::new();
    for m in sent(messages).iter().rev() {
        let MessageData::User(u) = &m.data else {
            continue;
        };
        for block in &u.content {
            if let PromptBlock::Link { uri, .. } = block
                && !uris.contains(uri)
            {
                uris.push(uri.clone());
            }
        }
    }
    uris
}

/// A user's message as the model sees it (protocol §4.20): its text, then each
/// resource its prompt carries — one given whole as its text (and, when it was
/// cut, how large it was), a linked file as `linked` has it, or why it could not
/// be read. Without `linked`, a link is the
/// reference the text has.
pub fn user_text(u: &UserData, linked: Option<&Linked>) -> String {
    let mut text = u.text.clone();
    let resource = |text: &mut String, uri: &str, body: &str| {
        text.push_str(&format!(
            "\n\n<resource uri=\"{uri}\">\n{body}\n</resource>"
        ));
    };
    for block in &u.content {
        match block {
            PromptBlock::Text { .. } => {}
            PromptBlock::Link { uri, name, .. } => match linked.and_then(|l| l.get(uri)) {
                Some(Ok(body)) => resource(&mut text, uri, body),
                Some(Err(why)) => text.push_str(&format!(
                    "\n\n[Steward] The prompt's file {name} ({uri}) could not be read: {why}."
                )),
                None => {}
            },
            PromptBlock::Resource {
                uri,
                text: Some(body),
                size,
                ..
            } => {
                resource(&mut text, uri, body);
                if let Some(size) = size {
                    text.push_str(&format!(
                        "\n\n[Steward] The prompt's resource {uri} is {size} bytes: only its first {} are shown.",
                        body.len()
                    ));
                }
            }
            PromptBlock::Resource { uri, mime_type, .. } => text.push_str(&format!(
                "\n\n[Steward] The prompt's resource {uri} is binary ({}): it is not shown.",
                mime_type.as_deref().unwrap_or("no type given")
            )),
        }
    }
    text
}

/// [`conversation`], with the files prompts link to as `linked` has them.
pub fn conversation_with(
    directory: &str,
    messages: &[MessageRow],
    linked: Option<&Linked>,
) -> Vec<ChatMessage> {
    let mut out = vec![ChatMessage::System(system_prompt(directory))];
    for message in sent(messages) {
        match &message.data {
            MessageData::User(u) => out.push(ChatMessage::User(user_text(u, linked))),
            MessageData::Synthetic(s) => match s.kind {
                SyntheticKind::Compaction => out.push(ChatMessage::User(format!(
                    "Summary of the conversation so far:\n{}",
                    s.text
                ))),
                SyntheticKind::Continuation => out.push(ChatMessage::User(s.text.clone())),
                SyntheticKind::Recovery | SyntheticKind::Interrupted => {
                    out.push(ChatMessage::User(format!("[Steward] {}", s.text)))
                }
                // For the user, not the model.
                SyntheticKind::Model => {}
            },
            MessageData::Assistant(a) => {
                // Separate parts (the step's text, recovery's note) stay apart.
                let text = a.text_parts().join("\n\n");
                let mut calls = Vec::new();
                let mut results = Vec::new();
                for part in &a.parts {
                    let Part::Tool(t) = part else { continue };
                    calls.push(ToolCall {
                        call_id: t.call_id.clone(),
                        tool: t.tool.clone(),
                        input: t.state.input.clone(),
                    });
                    let is_error = t.state.status != ToolStatus::Completed;
                    let content = match t.state.status {
                        ToolStatus::Completed => t.state.output.clone().unwrap_or_default(),
                        ToolStatus::Error => {
                            format!("Error: {}", t.state.error.as_deref().unwrap_or("failed"))
                        }
                        ToolStatus::Pending | ToolStatus::Running => {
                            "Error: the tool has no result".to_string()
                        }
                    };
                    results.push(ChatMessage::ToolResult {
                        call_id: t.call_id.clone(),
                        tool: t.tool.clone(),
                        content,
                        is_error,
                    });
                }
                let reasoning: Vec<_> = a.reasoning().collect();
                if text.is_empty() && calls.is_empty() {
                    continue;
                }
                out.push(ChatMessage::Assistant {
                    text,
                    tool_calls: calls,
                    reasoning,
                });
                out.extend(results);
            }
        }
    }
    out
}

/// A rough token count: about four characters per token.
pub fn estimate_tokens(messages: &[ChatMessage]) -> usize {
    let chars: usize = messages
        .iter()
        .map(|m| match m {
            ChatMessage::System(t) | ChatMessage::User(t) => t.len(),
            ChatMessage::Assistant {
                text, tool_calls, ..
            } => {
                text.len()
                    + tool_calls
                        .iter()
                        .map(|c| c.tool.len() + c.input.to_string().len())
                        .sum::<usize>()
            }
            ChatMessage::ToolResult { content, .. } => content.len(),
        })
        .sum();
    chars.div_ceil(4)
}

/// The call ids one request sends (protocol §4.18). A session's history may hold
/// ids that repeat from step to step (Ollama's are invented per answer:
/// `call_0`, `call_1`…) or that another API refuses (`functions.run_command:0` from
/// an OpenAI-compatible server, sent later to Anthropic, which takes only
/// `[a-zA-Z0-9_-]`). Each call gets an id of its own for the request — its stored id
/// when that is valid and not taken, else with the characters the API refuses
/// replaced by `_` and a suffix `_2`, `_3`… until it is unique — and each result
/// the id its call got: the result that follows a call refers to the latest call
/// with that stored id. What is stored is never changed.
#[derive(Debug, Default)]
pub struct WireIds {
    /// Whether a character may be sent in an id as it is.
    strict: bool,
    taken: std::collections::HashSet<String>,
    latest: std::collections::HashMap<String, String>,
}

impl WireIds {
    /// Ids limited to `[a-zA-Z0-9_-]` (Anthropic's).
    pub fn strict() -> WireIds {
        WireIds {
            strict: true,
            ..WireIds::default()
        }
    }

    /// Ids sent as they are, only made unique (OpenAI's).
    pub fn unique() -> WireIds {
        WireIds::default()
    }

    fn clean(&self, stored: &str) -> String {
        let clean: String = if self.strict {
            stored
                .chars()
                .map(|c| match c {
                    'a'..='z' | 'A'..='Z' | '0'..='9' | '_' | '-' => c,
                    _ => '_',
                })
                .collect()
        } else {
            stored.to_string()
        };
        if clean.is_empty() {
            "call".to_string()
        } else {
            clean
        }
    }

    /// The id a call with `stored` is sent with.
    pub fn call(&mut self, stored: &str) -> String {
        let base = self.clean(stored);
        let mut id = base.clone();
        let mut n = 1;
        while !self.taken.insert(id.clone()) {
            n += 1;
            id = format!("{base}_{n}");
        }
        self.latest.insert(stored.to_string(), id.clone());
        id
    }

    /// The id a result for the call `stored` is sent with.
    pub fn result(&self, stored: &str) -> String {
        self.latest
            .get(stored)
            .cloned()
            .unwrap_or_else(|| self.clean(stored))
    }
}

/// The instruction appended to a compaction request.
pub const COMPACTION_INSTRUCTION: &str = "Summarise the conversation so far for yourself: \
     the task, what was done, what was found, and what is left to do. Keep file names, \
     commands and decisions. Answer with the summary only.";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{
        AssistantData, MessageTime, SyntheticData, ToolPart, ToolState, UserData,
    };
    use pretty_assertions::assert_eq;
    use serde_json::json;

    /// A finished assistant of execution `exe_1` with `parts`.
    fn assistant(parts: Vec<Part>) -> MessageData {
        MessageData::Assistant(AssistantData {
            warnings: Vec::new(),
            unavailable: Vec::new(),
            execution_id: "exe_1".into(),
            provider: "p".into(),
            model: "m".into(),
            time: MessageTime {
                created: 0,
                completed: Some(1),
            },
            finish: None,
            error: None,
            usage: None,
            parts,
        })
    }

    #[test]
    fn r4_20_a_prompt_s_resources_follow_its_text_and_an_unread_file_says_why() {
        let u = UserData {
            input_id: "inp_1".into(),
            text: "look\n[a.txt](file:///w/a.txt)\n[b.txt](file:///b.txt)".into(),
            content: vec![
                PromptBlock::Text {
                    text: "look".into(),
                },
                PromptBlock::Link {
                    uri: "file:///w/a.txt".into(),
                    name: "a.txt".into(),
                    title: None,
                    mime_type: None,
                },
                PromptBlock::Link {
                    uri: "file:///b.txt".into(),
                    name: "b.txt".into(),
                    title: None,
                    mime_type: None,
                },
                PromptBlock::Resource {
                    uri: "file:///w/c.rs".into(),
                    mime_type: None,
                    text: Some("fn c() {}".into()),
                    blob: None,
                    size: None,
                },
                PromptBlock::Resource {
                    uri: "file:///w/d.png".into(),
                    mime_type: Some("image/png".into()),
                    text: None,
                    blob: Some("iVBO".into()),
                    size: None,
                },
            ],
        };
        let linked: Linked = [
            ("file:///w/a.txt".to_string(), Ok("A".to_string())),
            (
                "file:///b.txt".to_string(),
                Err("it is outside the session directory".to_string()),
            ),
        ]
        .into_iter()
        .collect();
        assert_eq!(
            user_text(&u, Some(&linked)),
            "look\n[a.txt](file:///w/a.txt)\n[b.txt](file:///b.txt)\n\n\
             <resource uri=\"file:///w/a.txt\">\nA\n</resource>\n\n\
             [Steward] The prompt's file b.txt (file:///b.txt) could not be read: it is outside the session directory.\n\n\
             <resource uri=\"file:///w/c.rs\">\nfn c() {}\n</resource>\n\n\
             [Steward] The prompt's resource file:///w/d.png is binary (image/png): it is not shown."
        );
        let messages = vec![row(0, MessageData::User(u.clone()))];
        assert_eq!(links(&messages), vec!["file:///w/a.txt", "file:///b.txt"]);
        // Without reading, a link is the reference its text has.
        assert!(!user_text(&u, None).contains("could not be read"));
    }

    fn row(seq: i64, data: MessageData) -> MessageRow {
        MessageRow {
            id: format!("msg_{seq}"),
            session_id: "ses_1".into(),
            seq,
            time_created: 0,
            time_updated: 0,
            data,
        }
    }

    #[test]
    fn r3_4_every_tool_call_is_followed_by_its_result() {
        let mut done = ToolState::pending(json!({"path": "."}));
        done.status = ToolStatus::Completed;
        done.output = Some("a.txt".into());
        let mut failed = ToolState::pending(json!({}));
        failed.status = ToolStatus::Error;
        failed.error = Some("Tool execution outcome unknown after server restart".into());
        let messages = vec![
            row(
                1,
                MessageData::User(UserData {
                    input_id: "inp_1".into(),
                    text: "hi".into(),
                    content: Vec::new(),
                }),
            ),
            row(
                2,
                assistant(vec![
                    Part::Text {
                        id: "prt_1".into(),
                        text: "Looking.".into(),
                    },
                    Part::Tool(ToolPart {
                        id: "p2".into(),
                        call_id: "c1".into(),
                        tool: "list_dir".into(),
                        state: done,
                    }),
                    Part::Tool(ToolPart {
                        id: "p3".into(),
                        call_id: "c2".into(),
                        tool: "run_command".into(),
                        state: failed,
                    }),
                ]),
            ),
            row(
                3,
                MessageData::Synthetic(SyntheticData {
                    provider: None,
                    model: None,
                    kind: SyntheticKind::Continuation,
                    text: "Continue.".into(),
                    label: None,
                    execution_id: None,
                    input_id: None,
                    through_seq: None,
                    phase: None,
                }),
            ),
        ];
        let conversation = conversation("/w", &messages);
        assert_eq!(
            conversation[1..].to_vec(),
            vec![
                ChatMessage::User("hi".into()),
                ChatMessage::Assistant {
                    text: "Looking.".into(),
                    tool_calls: vec![
                        ToolCall {
                            call_id: "c1".into(),
                            tool: "list_dir".into(),
                            input: json!({"path": "."})
                        },
                        ToolCall {
                            call_id: "c2".into(),
                            tool: "run_command".into(),
                            input: json!({})
                        },
                    ],
                    reasoning: vec![],
                },
                ChatMessage::ToolResult {
                    call_id: "c1".into(),
                    tool: "list_dir".into(),
                    content: "a.txt".into(),
                    is_error: false,
                },
                ChatMessage::ToolResult {
                    call_id: "c2".into(),
                    tool: "run_command".into(),
                    content: "Error: Tool execution outcome unknown after server restart".into(),
                    is_error: true,
                },
                ChatMessage::User("Continue.".into()),
            ]
        );
    }

    #[test]
    fn r3_5_text_parts_of_one_assistant_are_sent_apart() {
        let assistant = assistant(vec![
            Part::Text {
                id: "prt_1".into(),
                text: "Running.".into(),
            },
            Part::Text {
                id: "recovery:exe_1".into(),
                text: "Session execution interrupted by server restart".into(),
            },
        ]);
        let conversation = conversation("/w", &[row(1, assistant)]);
        assert_eq!(
            conversation[1],
            ChatMessage::Assistant {
                text: "Running.\n\nSession execution interrupted by server restart".into(),
                tool_calls: vec![],
                reasoning: vec![],
            }
        );
    }

    #[test]
    fn a_compaction_summary_stands_for_everything_before_it() {
        let summary = MessageData::Synthetic(SyntheticData {
            provider: None,
            model: None,
            kind: SyntheticKind::Compaction,
            text: "did things".into(),
            label: None,
            execution_id: None,
            input_id: None,
            through_seq: Some(1),
            phase: None,
        });
        let messages = vec![
            row(
                1,
                MessageData::User(UserData {
                    input_id: "i".into(),
                    text: "old".into(),
                    content: Vec::new(),
                }),
            ),
            row(3, summary),
            row(
                4,
                MessageData::User(UserData {
                    input_id: "j".into(),
                    text: "new".into(),
                    content: Vec::new(),
                }),
            ),
        ];
        let conversation = conversation("/w", &messages);
        assert_eq!(
            conversation[1..].to_vec(),
            vec![
                ChatMessage::User("Summary of the conversation so far:\ndid things".into()),
                ChatMessage::User("new".into()),
            ]
        );
        assert!(estimate_tokens(&conversation) > 0);
    }
}
