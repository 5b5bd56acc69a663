//! The transcript as ACP `session/update`s: user prompts as `user_message_chunk`,
//! assistant text and the engine's own notes (recovery, continuation, cancellation)
//! as `agent_message_chunk`, each tool call as a `tool_call` and its progress as
//! `tool_call_update`s — recovery's failed tools included, with the exact restart
//! text. The same mapping serves a live turn (from committed events) and
//! `session/load` (from the stored transcript).

use std::collections::HashMap;

use agent_client_protocol_schema::v1::{
    ContentBlock, ContentChunk, SessionUpdate, ToolCall, ToolCallContent, ToolCallStatus,
    ToolCallUpdate, ToolCallUpdateFields, ToolKind,
};
use serde_json::Value;
use steward_engine::events::Event;
use steward_engine::message::{MessageData, Part, SyntheticKind, ToolPart, ToolStatus};
use steward_engine::projection::MessageRow;

pub fn kind(tool: &str) -> ToolKind {
    match tool {
        "read_file" => ToolKind::Read,
        "list_dir" => ToolKind::Search,
        "write_file" => ToolKind::Edit,
        "run_command" => ToolKind::Execute,
        _ => ToolKind::Other,
    }
}

/// `run_command: ls -la`, `read_file notes.txt`.
pub fn title(tool: &str, input: &Value) -> String {
    let arg = ["command", "path"]
        .iter()
        .find_map(|k| input.get(k).and_then(Value::as_str));
    match arg {
        Some(arg) => {
            let first = arg.lines().next().unwrap_or_default();
            let mut short: String = first.chars().take(80).collect();
            if first.chars().count() > 80 || arg.lines().count() > 1 {
                short.push('…');
            }
            format!("{tool} {short}")
        }
        None => tool.to_string(),
    }
}

pub fn status(status: ToolStatus) -> ToolCallStatus {
    match status {
        ToolStatus::Pending => ToolCallStatus::Pending,
        ToolStatus::Running => ToolCallStatus::InProgress,
        ToolStatus::Completed => ToolCallStatus::Completed,
        ToolStatus::Error => ToolCallStatus::Failed,
    }
}

fn text_chunk(text: String) -> ContentChunk {
    ContentChunk::new(ContentBlock::from(text))
}

pub fn agent_text(text: impl Into<String>) -> SessionUpdate {
    SessionUpdate::AgentMessageChunk(text_chunk(text.into()))
}

pub fn user_text(text: impl Into<String>) -> SessionUpdate {
    SessionUpdate::UserMessageChunk(text_chunk(text.into()))
}

pub fn tool_called(call_id: &str, tool: &str, input: &Value) -> SessionUpdate {
    SessionUpdate::ToolCall(
        ToolCall::new(call_id.to_string(), title(tool, input))
            .kind(kind(tool))
            .status(ToolCallStatus::Pending)
            .raw_input(input.clone()),
    )
}

pub fn tool_update(call_id: &str, to: ToolCallStatus, text: Option<&str>) -> SessionUpdate {
    let mut fields = ToolCallUpdateFields::new().status(to);
    if let Some(text) = text {
        fields = fields.content(vec![ToolCallContent::from(text.to_string())]);
    }
    SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(call_id.to_string(), fields))
}

/// A tool part as it ends: its final status with its output or error.
fn tool_final(tool: &ToolPart) -> SessionUpdate {
    let text = tool.state.error.as_deref().or(tool.state.output.as_deref());
    tool_update(&tool.call_id, status(tool.state.status), text)
}

/// What `session/load` sends: the whole transcript, in order.
pub fn replay(messages: &[MessageRow]) -> Vec<SessionUpdate> {
    let mut out = Vec::new();
    for message in messages {
        match &message.data {
            MessageData::User(u) => out.push(user_text(u.text.clone())),
            MessageData::Synthetic(s) => out.push(agent_text(synthetic_text(s))),
            MessageData::Assistant(a) => {
                let mut said: Vec<&str> = Vec::new();
                for part in &a.parts {
                    match part {
                        Part::Text { id, text } if !text.is_empty() => {
                            if id.starts_with("recovery:") {
                                said.push(text);
                            }
                            out.push(agent_text(text.clone()));
                        }
                        Part::Text { .. } => {}
                        Part::Tool(tool) => {
                            out.push(tool_called(&tool.call_id, &tool.tool, &tool.state.input));
                            if tool.state.status != ToolStatus::Pending {
                                out.push(tool_final(tool));
                            }
                        }
                    }
                }
                if let Some(error) = a
                    .error
                    .as_ref()
                    .filter(|e| !said.contains(&e.message.as_str()))
                {
                    out.push(agent_text(format!("\n{}", error.message)));
                }
            }
        }
    }
    out
}

/// How an engine note reads to the client.
pub fn synthetic_text(s: &steward_engine::message::SyntheticData) -> String {
    match s.kind {
        SyntheticKind::Continuation => {
            format!("↻ {}", s.label.as_deref().unwrap_or(&s.text))
        }
        SyntheticKind::Recovery | SyntheticKind::Interrupted => format!("↻ {}", s.text),
        SyntheticKind::Compaction => format!(
            "{}: {}",
            s.label.as_deref().unwrap_or("Compacted conversation"),
            s.text
        ),
    }
}

/// The updates of one committed event during a live turn. `tools` remembers each
/// call's last status sent, so the final reconciliation sends only what changed.
pub fn from_event(
    event: &Event,
    tools: &mut HashMap<String, ToolCallStatus>,
) -> Vec<SessionUpdate> {
    match event {
        Event::StepText { text, .. } if !text.is_empty() => vec![agent_text(text.clone())],
        Event::ToolCalled {
            call_id,
            tool,
            input,
            ..
        } => {
            tools.insert(call_id.clone(), ToolCallStatus::Pending);
            vec![tool_called(call_id, tool, input)]
        }
        Event::ToolStarted { call_id, .. } => {
            tools.insert(call_id.clone(), ToolCallStatus::InProgress);
            vec![tool_update(call_id, ToolCallStatus::InProgress, None)]
        }
        Event::ToolCompleted {
            call_id, output, ..
        } => {
            tools.insert(call_id.clone(), ToolCallStatus::Completed);
            vec![tool_update(
                call_id,
                ToolCallStatus::Completed,
                Some(output),
            )]
        }
        Event::ToolFailed { call_id, error, .. } => {
            tools.insert(call_id.clone(), ToolCallStatus::Failed);
            vec![tool_update(call_id, ToolCallStatus::Failed, Some(error))]
        }
        Event::StepFailed { error, .. } => vec![agent_text(format!("\n{}", error.message))],
        _ => Vec::new(),
    }
}

/// After a turn: a final update for every tool sent in it whose stored status is
/// not the last one sent (a cancellation or a recovery closed it).
pub fn settle(
    messages: &[MessageRow],
    tools: &mut HashMap<String, ToolCallStatus>,
) -> Vec<SessionUpdate> {
    let mut out = Vec::new();
    for message in messages {
        let Some(a) = message.data.as_assistant() else {
            continue;
        };
        for tool in a.tools() {
            let Some(sent) = tools.get(&tool.call_id) else {
                continue;
            };
            let now = status(tool.state.status);
            if *sent != now {
                tools.insert(tool.call_id.clone(), now);
                out.push(tool_final(tool));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;
    use steward_engine::message::MessageKind;

    fn row(kind: MessageKind, data: Value) -> MessageRow {
        MessageRow {
            id: "m".into(),
            session_id: "ses_1".into(),
            seq: 0,
            time_created: 0,
            time_updated: 0,
            data: MessageData::from_json(kind, &data.to_string()).unwrap(),
        }
    }

    #[test]
    fn a_recovered_transcript_replays_with_the_restart_texts_once() {
        let messages = vec![
            row(
                MessageKind::User,
                json!({"input_id": "i", "text": "look around"}),
            ),
            row(
                MessageKind::Assistant,
                json!({"execution_id": "exe_1", "provider": "p", "model": "m",
                "time": {"created": 1}, "finish": "error",
                "error": {"type": "interrupted", "message": "Session execution interrupted by server restart"},
                "parts": [
                  {"id": "prt_1", "type": "text", "text": "Looking."},
                  {"id": "prt_2", "type": "tool", "call_id": "call_1", "tool": "run_command",
                   "state": {"status": "error", "input": {"command": "sleep 300"},
                             "error": "Tool execution outcome unknown after server restart"}},
                  {"id": "recovery:exe_1", "type": "text", "text": "Session execution interrupted by server restart"}
                ]}),
            ),
            row(
                MessageKind::Synthetic,
                json!({"kind": "continuation", "text": "The server restarted…", "label": "Continuing after restart"}),
            ),
        ];
        let updates: Vec<Value> = replay(&messages)
            .into_iter()
            .map(|u| serde_json::to_value(u).unwrap())
            .collect();
        assert_eq!(
            updates,
            vec![
                json!({"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "look around"}}),
                json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "Looking."}}),
                json!({"sessionUpdate": "tool_call", "toolCallId": "call_1", "title": "run_command sleep 300",
                       "kind": "execute", "rawInput": {"command": "sleep 300"}}),
                json!({"sessionUpdate": "tool_call_update", "toolCallId": "call_1", "status": "failed",
                       "content": [{"type": "content", "content": {"type": "text",
                                    "text": "Tool execution outcome unknown after server restart"}}]}),
                json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text",
                       "text": "Session execution interrupted by server restart"}}),
                json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text",
                       "text": "↻ Continuing after restart"}}),
            ]
        );
    }

    #[test]
    fn a_live_tool_call_goes_pending_in_progress_completed_and_settles_once() {
        let mut tools = HashMap::new();
        let called = Event::ToolCalled {
            message_id: "m".into(),
            part_id: "p".into(),
            call_id: "call_1".into(),
            tool: "read_file".into(),
            input: json!({"path": "a.txt"}),
        };
        let started = Event::ToolStarted {
            message_id: "m".into(),
            call_id: "call_1".into(),
            process: None,
        };
        let kinds: Vec<Value> = [called, started]
            .iter()
            .flat_map(|e| from_event(e, &mut tools))
            .map(|u| serde_json::to_value(u).unwrap())
            .collect();
        assert_eq!(kinds[0]["sessionUpdate"], "tool_call");
        assert_eq!(kinds[0]["kind"], "read");
        assert_eq!(kinds[1]["status"], "in_progress");
        // A cancellation closed it: the settlement says so, once.
        let closed = vec![row(
            MessageKind::Assistant,
            json!({"execution_id": "e", "provider": "p", "model": "m", "time": {"created": 1},
                   "parts": [{"id": "p", "type": "tool", "call_id": "call_1", "tool": "read_file",
                              "state": {"status": "error", "input": {"path": "a.txt"}, "error": "Tool execution interrupted"}}]}),
        )];
        assert_eq!(settle(&closed, &mut tools).len(), 1);
        assert_eq!(settle(&closed, &mut tools).len(), 0);
    }
}
