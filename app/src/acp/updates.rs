//! The transcript as ACP `session/update`s: user prompts as `user_message_chunk`,
//! assistant text and the engine's own notes (recovery, continuation, cancellation)
//! as `agent_message_chunk`, the compaction summary as a marked
//! `agent_thought_chunk`, each tool call as a `tool_call` and its progress as
//! `tool_call_update`s — recovery's failed tools included, with the exact restart
//! text. The same mapping serves a live turn (from committed events) and
//! `session/load` (from the stored transcript); a [`Stream`] remembers what one
//! client was sent of one session.

use std::collections::HashMap;

use agent_client_protocol_schema::v1::{
    ContentBlock, ContentChunk, SessionUpdate, ToolCall, ToolCallContent, ToolCallLocation,
    ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields, ToolKind,
};
use serde_json::Value;
use steward_engine::events::Event;
use steward_engine::message::{
    AssistantData, MessageData, MessageError, Part, PromptBlock, SyntheticData, SyntheticKind,
    TOOL_OUTCOME_UNKNOWN, ToolPart, ToolStatus, UserData,
};
use steward_engine::projection::MessageRow;

pub fn kind(tool: &str) -> ToolKind {
    match tool {
        "read_file" => ToolKind::Read,
        "list_dir" | "grep" | "glob" => ToolKind::Search,
        "write_file" | "edit_file" => ToolKind::Edit,
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

/// What the model reasoned, as the client's thought text.
pub fn thought(text: impl Into<String>) -> SessionUpdate {
    SessionUpdate::AgentThoughtChunk(text_chunk(text.into()))
}

/// The compaction summary: what the model continues from, not the agent's answer
/// (it retells the conversation, the user's prompts included). Sent as thought
/// text, labelled (`Compacted conversation: …`) and marked in `_meta`:
/// `{"steward": {"kind": "compaction", "throughSeq": N}}` (protocol §3.2).
pub fn compaction(s: &SyntheticData) -> SessionUpdate {
    let mut meta = serde_json::Map::new();
    meta.insert(
        "steward".into(),
        serde_json::json!({"kind": "compaction", "throughSeq": s.through_seq}),
    );
    SessionUpdate::AgentThoughtChunk(text_chunk(synthetic_text(s)).meta(meta))
}

pub fn user_text(text: impl Into<String>) -> SessionUpdate {
    SessionUpdate::UserMessageChunk(text_chunk(text.into()))
}

/// A user's prompt as the client sent it: block by block when it carries resources
/// (a link as a `resource_link`, a resource as itself — its text as kept, a blob
/// too large to keep as a `resource_link` to its URI; protocol §4.20), else its
/// text.
pub fn user_prompt(user: &UserData) -> Vec<SessionUpdate> {
    use agent_client_protocol_schema::v1::{
        BlobResourceContents, EmbeddedResource, EmbeddedResourceResource, ResourceLink,
        TextResourceContents,
    };
    if user.content.is_empty() {
        return vec![user_text(user.text.clone())];
    }
    user.content
        .iter()
        .map(|block| {
            let block = match block {
                PromptBlock::Text { text } => ContentBlock::from(text.clone()),
                PromptBlock::Link {
                    uri,
                    name,
                    title,
                    mime_type,
                } => ContentBlock::ResourceLink(
                    ResourceLink::new(name.clone(), uri.clone())
                        .title(title.clone())
                        .mime_type(mime_type.clone()),
                ),
                // A blob too large to keep is replayed as a mention of its URI.
                PromptBlock::Resource {
                    uri,
                    mime_type,
                    text: None,
                    blob: None,
                    size,
                } => ContentBlock::ResourceLink(
                    ResourceLink::new(link_name(uri), uri.clone())
                        .mime_type(mime_type.clone())
                        .size(size.and_then(|s| i64::try_from(s).ok())),
                ),
                PromptBlock::Resource {
                    uri,
                    mime_type,
                    text,
                    blob,
                    ..
                } => {
                    let resource = match text {
                        Some(text) => EmbeddedResourceResource::TextResourceContents(
                            TextResourceContents::new(text.clone(), uri.clone())
                                .mime_type(mime_type.clone()),
                        ),
                        None => EmbeddedResourceResource::BlobResourceContents(
                            BlobResourceContents::new(
                                blob.clone().unwrap_or_default(),
                                uri.clone(),
                            )
                            .mime_type(mime_type.clone()),
                        ),
                    };
                    ContentBlock::Resource(EmbeddedResource::new(resource))
                }
            };
            SessionUpdate::UserMessageChunk(ContentChunk::new(block))
        })
        .collect()
}

/// The name a URI is mentioned by: its last path segment, or the URI itself.
fn link_name(uri: &str) -> String {
    let path = uri.split(['?', '#']).next().unwrap_or(uri);
    match path.rsplit('/').next() {
        Some(last) if !last.is_empty() => last.to_string(),
        _ => uri.to_string(),
    }
}

pub fn tool_called(
    call_id: &str,
    tool: &str,
    input: &Value,
    directory: Option<&std::path::Path>,
) -> SessionUpdate {
    SessionUpdate::ToolCall(
        ToolCall::new(call_id.to_string(), title(tool, input))
            .kind(kind(tool))
            .status(ToolCallStatus::Pending)
            .raw_input(input.clone())
            .locations(locations(input, directory)),
    )
}

/// Where a file tool's call reaches (its `path`, made absolute against the
/// session's directory), so that the editor can follow.
pub fn locations(input: &Value, directory: Option<&std::path::Path>) -> Vec<ToolCallLocation> {
    let Some(path) = input.get("path").and_then(Value::as_str) else {
        return Vec::new();
    };
    let path = std::path::Path::new(path);
    let absolute = match (path.is_absolute(), directory) {
        (true, _) => path.to_path_buf(),
        (false, Some(dir)) => dir.join(path),
        (false, None) => return Vec::new(),
    };
    vec![ToolCallLocation::new(folded(&absolute))]
}

/// `path` with `.` and `..` folded away as written (where the call says it goes;
/// where it lands, links followed, comes with its diff).
fn folded(path: &std::path::Path) -> std::path::PathBuf {
    use std::path::Component;
    let mut out = std::path::PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// A completed edit's diff (`structured.diff`), as the client shows one: its
/// content, and its location with the line where it starts.
pub fn diff_of(structured: Option<&Value>) -> Option<steward_engine::tools::FileDiff> {
    serde_json::from_value(structured?.get("diff")?.clone()).ok()
}

/// A diff as tool call content, saying so when a side was cut.
pub fn diff_content(diff: &steward_engine::tools::FileDiff) -> Vec<ToolCallContent> {
    let mut content = vec![ToolCallContent::Diff(
        agent_client_protocol_schema::v1::Diff::new(diff.path.clone(), diff.new_text.clone())
            .old_text(diff.old_text.clone()),
    )];
    if diff.truncated {
        content.push(ToolCallContent::from(format!(
            "(The diff is cut: what changes in {} is longer than {} KiB.)",
            diff.path,
            steward_engine::tools::diff::MAX_SIDE / 1024
        )));
    }
    content
}

pub fn tool_update(call_id: &str, to: ToolCallStatus, text: Option<&str>) -> SessionUpdate {
    let mut fields = ToolCallUpdateFields::new().status(to);
    if let Some(text) = text {
        fields = fields.content(vec![ToolCallContent::from(text.to_string())]);
    }
    SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(call_id.to_string(), fields))
}

/// A completed call's update: its output, and for an edit the diff it made, where
/// it starts.
pub fn tool_completed(call_id: &str, output: &str, structured: Option<&Value>) -> SessionUpdate {
    let mut fields = ToolCallUpdateFields::new().status(ToolCallStatus::Completed);
    let mut content = vec![ToolCallContent::from(output.to_string())];
    if let Some(diff) = diff_of(structured) {
        content.extend(diff_content(&diff));
        fields = fields.locations(vec![
            ToolCallLocation::new(diff.path.clone()).line(diff.changed_line()),
        ]);
    }
    fields = fields.content(content);
    SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(call_id.to_string(), fields))
}

/// A running command's output so far.
pub fn tool_output(call_id: &str, text: &str) -> SessionUpdate {
    tool_update(call_id, ToolCallStatus::InProgress, Some(text))
}

/// A tool part as it ends: its final status with its output or error.
fn tool_final(tool: &ToolPart) -> SessionUpdate {
    if tool.state.status == ToolStatus::Completed {
        return tool_completed(
            &tool.call_id,
            tool.state.output.as_deref().unwrap_or(""),
            tool.state.structured.as_ref(),
        );
    }
    let text = tool.state.error.as_deref().or(tool.state.output.as_deref());
    tool_update(&tool.call_id, status(tool.state.status), text)
}

/// How an engine note reads to the client, with the mark the terminal interface
/// uses: `↻` for what a restart did, `⊘` for a cancellation.
pub fn synthetic_text(s: &SyntheticData) -> String {
    match s.kind {
        SyntheticKind::Continuation => {
            format!("↻ {}", s.label.as_deref().unwrap_or(&s.text))
        }
        SyntheticKind::Recovery => format!("↻ {}", s.text),
        SyntheticKind::Interrupted => format!("⊘ {}", s.text),
        SyntheticKind::Compaction => format!(
            "{}: {}",
            s.label.as_deref().unwrap_or("Compacted conversation"),
            s.text
        ),
        SyntheticKind::Model => format!("⇄ {}", s.text),
    }
}

/// The text of an assistant's error: a cancellation's with `⊘`, others as they are.
fn error_text(error: &MessageError) -> String {
    if error.kind == "interrupted" {
        format!("⊘ {}", error.message)
    } else {
        error.message.clone()
    }
}

/// What one client was sent of one session: each tool call's last status, and
/// which text the last agent chunk belonged to — a new piece of text (another part,
/// another message, a note) after an agent chunk starts a new paragraph, so that
/// the client, which joins consecutive chunks, does not run them together.
#[derive(Debug, Default)]
pub struct Stream {
    /// The session's directory: relative tool paths are made absolute against it.
    pub directory: Option<std::path::PathBuf>,
    tools: HashMap<String, ToolCallStatus>,
    last_text: Option<String>,
    /// Agent chunks sent so far.
    texts: u64,
    /// The calls of each recovered execution whose outcome is unknown (by
    /// execution id), as the transcript or a live recovery showed them: the
    /// continuation's first live update names them again ([`Stream::ending`]).
    unknown: HashMap<String, Vec<String>>,
}

impl Stream {
    /// Agent chunks sent so far (to tell whether any came since a moment).
    pub fn texts(&self) -> u64 {
        self.texts
    }

    /// A user's prompt began a turn. The client's own prompt is on its screen
    /// already: when nothing streamed since it was sent, the turn's first text
    /// starts without a paragraph break; when something did (a continuation still
    /// running), it is set apart. Another process's prompt is shown as the
    /// client's would be.
    pub fn prompt(&mut self, user: &UserData, own_sent_at: Option<u64>) -> Vec<SessionUpdate> {
        match own_sent_at {
            Some(at) => {
                if self.texts == at {
                    self.last_text = None;
                }
                Vec::new()
            }
            None => user_prompt(user)
                .into_iter()
                .map(|u| self.other(u))
                .collect(),
        }
    }

    /// A step's MCP servers that did not start: said, not silently absent.
    fn unavailable(
        &mut self,
        message_id: &str,
        missing: &[steward_engine::message::Unavailable],
    ) -> Vec<SessionUpdate> {
        missing
            .iter()
            .map(|m| {
                let text = format!("⚠ MCP server `{}` {}", m.server, m.error);
                self.agent(&format!("{message_id}:unavailable:{}", m.server), &text)
            })
            .collect()
    }

    /// Agent text belonging to `key` (a part id, or a note's own key).
    fn agent(&mut self, key: &str, text: &str) -> SessionUpdate {
        let text = match &self.last_text {
            Some(last) if last != key => format!("\n\n{text}"),
            _ => text.to_string(),
        };
        self.last_text = Some(key.to_string());
        self.texts += 1;
        agent_text(text)
    }

    /// An engine note: agent text with its mark, or the compaction summary as a
    /// marked thought ([`compaction`]).
    fn note(&mut self, message_id: &str, s: &SyntheticData) -> SessionUpdate {
        if s.kind == SyntheticKind::Compaction {
            return self.other(compaction(s));
        }
        self.agent(message_id, &synthetic_text(s))
    }

    fn other(&mut self, update: SessionUpdate) -> SessionUpdate {
        self.last_text = None;
        update
    }

    fn tool(&mut self, call_id: &str, to: ToolCallStatus, update: SessionUpdate) -> SessionUpdate {
        self.tools.insert(call_id.to_string(), to);
        self.other(update)
    }

    /// A tool part's final state, unless it is what was last sent.
    fn tool_end(&mut self, tool: &ToolPart, out: &mut Vec<SessionUpdate>) {
        let now = status(tool.state.status);
        if self.tools.get(&tool.call_id) != Some(&now) {
            out.push(self.tool(&tool.call_id, now, tool_final(tool)));
        }
    }

    /// What `session/load` sends: the whole transcript, in order.
    pub fn replay(&mut self, messages: &[MessageRow]) -> Vec<SessionUpdate> {
        let mut out = Vec::new();
        for message in messages {
            match &message.data {
                MessageData::User(u) => {
                    for update in user_prompt(u) {
                        out.push(self.other(update));
                    }
                }
                MessageData::Synthetic(s) => {
                    // A continuation already in the transcript has run: nothing is
                    // left to say live.
                    if let Some(execution) = &s.execution_id {
                        self.unknown.remove(execution);
                    }
                    out.push(self.note(&message.id, s));
                }
                MessageData::Assistant(a) => {
                    out.extend(self.unavailable(&message.id, &a.unavailable));
                    for part in &a.parts {
                        match part {
                            Part::Text { id, text } if !text.is_empty() => {
                                out.push(self.agent(id, &part_text(id, text)));
                            }
                            Part::Text { .. } => {}
                            Part::Reasoning { text, .. } if !text.is_empty() => {
                                out.push(self.other(thought(text.clone())));
                            }
                            Part::Reasoning { .. } => {}
                            Part::Tool(tool) => {
                                let called = tool_called(
                                    &tool.call_id,
                                    &tool.tool,
                                    &tool.state.input,
                                    self.directory.as_deref(),
                                );
                                out.push(self.tool(&tool.call_id, ToolCallStatus::Pending, called));
                                if tool.state.status != ToolStatus::Pending {
                                    self.tool_end(tool, &mut out);
                                }
                            }
                        }
                    }
                    out.extend(self.unsaid_error(&message.id, a));
                    self.remember_unknown(a);
                }
            }
        }
        out
    }

    /// Keeps the calls of a recovered assistant whose outcome is unknown.
    fn remember_unknown(&mut self, a: &AssistantData) {
        let unknown: Vec<String> = a
            .tools()
            .filter(|t| {
                t.state.status == ToolStatus::Error
                    && t.state
                        .error
                        .as_deref()
                        .is_some_and(|e| e.starts_with(TOOL_OUTCOME_UNKNOWN))
            })
            .map(|t| format!("`{}`", title(&t.tool, &t.state.input)))
            .collect();
        if !unknown.is_empty() {
            self.unknown.insert(a.execution_id.clone(), unknown);
        }
    }

    /// The error of an assistant, unless a recovery text part already said it.
    fn unsaid_error(&mut self, message_id: &str, a: &AssistantData) -> Option<SessionUpdate> {
        let error = a.error.as_ref()?;
        let said = a.parts.iter().any(|p| {
            matches!(p, Part::Text { id, text } if id.starts_with(RECOVERY_PART) && *text == error.message)
        });
        (!said).then(|| self.agent(&format!("{message_id}:error"), &error_text(error)))
    }

    /// The updates of one committed event of a live execution: text as it streams,
    /// tool calls as they are called, start and end. Events that close a message
    /// on the engine's own account (a failure, a cancellation, a recovery, a
    /// continuation) are shown from the message they wrote, through
    /// [`Stream::ending`].
    pub fn event(&mut self, event: &Event) -> Vec<SessionUpdate> {
        match event {
            Event::StepStarted {
                message_id,
                tools: Some(tools),
                ..
            } if !tools.unavailable.is_empty() => self.unavailable(message_id, &tools.unavailable),
            Event::StepText { part_id, text, .. } if !text.is_empty() => {
                vec![self.agent(part_id, text)]
            }
            Event::StepReasoning { text, .. } if !text.is_empty() => {
                vec![self.other(thought(text.clone()))]
            }
            Event::ToolCalled {
                call_id,
                tool,
                input,
                ..
            } => {
                let called = tool_called(call_id, tool, input, self.directory.as_deref());
                vec![self.tool(call_id, ToolCallStatus::Pending, called)]
            }
            Event::ToolStarted { call_id, .. } => vec![self.tool(
                call_id,
                ToolCallStatus::InProgress,
                tool_update(call_id, ToolCallStatus::InProgress, None),
            )],
            Event::ToolCompleted {
                call_id,
                output,
                structured,
                ..
            } => vec![self.tool(
                call_id,
                ToolCallStatus::Completed,
                tool_completed(call_id, output, structured.as_ref()),
            )],
            Event::ToolFailed { call_id, error, .. } => vec![self.tool(
                call_id,
                ToolCallStatus::Failed,
                tool_update(call_id, ToolCallStatus::Failed, Some(error)),
            )],
            _ => Vec::new(),
        }
    }

    /// What a message the engine closed (or wrote) on its own account adds to what
    /// was sent: the final state of each tool it closed, and its note — a
    /// recovery's restart text, a cancellation, a failure, a continuation.
    pub fn ending(&mut self, message: &MessageRow) -> Vec<SessionUpdate> {
        let mut out = Vec::new();
        match &message.data {
            // A client that hides what a load replays (and what comes just after
            // it) never saw the tool that failed as "outcome unknown": the
            // continuation's own note, its first live update, says it again.
            MessageData::Synthetic(s) => {
                let unknown = match (s.kind, &s.execution_id) {
                    (SyntheticKind::Continuation, Some(execution)) => {
                        self.unknown.remove(execution)
                    }
                    _ => None,
                };
                match unknown {
                    Some(calls) => {
                        let text = format!(
                            "{}. {} (it was running when Steward stopped; it is not run again): {}",
                            synthetic_text(s),
                            TOOL_OUTCOME_UNKNOWN,
                            calls.join(", ")
                        );
                        out.push(self.agent(&message.id, &text));
                    }
                    None => out.push(self.note(&message.id, s)),
                }
            }
            MessageData::Assistant(a) => {
                self.remember_unknown(a);
                for part in &a.parts {
                    match part {
                        Part::Tool(tool) if self.tools.contains_key(&tool.call_id) => {
                            self.tool_end(tool, &mut out);
                        }
                        Part::Text { id, text } if id.starts_with(RECOVERY_PART) => {
                            out.push(self.agent(id, &part_text(id, text)));
                        }
                        _ => {}
                    }
                }
                out.extend(self.unsaid_error(&message.id, a));
            }
            MessageData::User(_) => {}
        }
        out
    }

    /// After a turn: a final update for every tool sent whose stored status is not
    /// the last one sent (what no event reached the client for, if any was missed).
    pub fn settle(&mut self, messages: &[MessageRow]) -> Vec<SessionUpdate> {
        let mut out = Vec::new();
        for a in messages.iter().filter_map(|m| m.data.as_assistant()) {
            for tool in a.tools() {
                if self.tools.contains_key(&tool.call_id) {
                    self.tool_end(tool, &mut out);
                }
            }
        }
        out
    }
}

/// The prefix of the text part a recovery adds to an assistant.
const RECOVERY_PART: &str = "recovery:";

/// A text part as shown: a recovery's restart text with its mark.
fn part_text(id: &str, text: &str) -> String {
    if id.starts_with(RECOVERY_PART) {
        format!("↻ {text}")
    } else {
        text.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;
    use steward_engine::message::MessageKind;

    fn row(id: &str, kind: MessageKind, data: Value) -> MessageRow {
        MessageRow {
            id: id.into(),
            session_id: "ses_1".into(),
            seq: 0,
            time_created: 0,
            time_updated: 0,
            data: MessageData::from_json(kind, &data.to_string()).unwrap(),
        }
    }

    fn user(text: &str) -> UserData {
        UserData {
            input_id: "inp_1".into(),
            text: text.into(),
            content: Vec::new(),
        }
    }

    #[test]
    fn r4_20_a_blob_too_large_to_keep_is_replayed_as_a_link_to_its_uri() {
        let mut u = user("[file:///w/big.png](file:///w/big.png)");
        u.content = vec![
            PromptBlock::Resource {
                uri: "file:///w/big.png#x".into(),
                mime_type: Some("image/png".into()),
                text: None,
                blob: None,
                size: Some(300_000),
            },
            PromptBlock::Resource {
                uri: "file:///w/small.png".into(),
                mime_type: None,
                text: None,
                blob: Some("iVBO".into()),
                size: None,
            },
        ];
        let replayed = json_of(user_prompt(&u));
        assert_eq!(replayed[0]["content"]["type"], "resource_link");
        assert_eq!(replayed[0]["content"]["name"], "big.png");
        assert_eq!(replayed[0]["content"]["uri"], "file:///w/big.png#x");
        assert_eq!(replayed[0]["content"]["size"], 300_000);
        assert_eq!(replayed[1]["content"]["type"], "resource");
        assert_eq!(replayed[1]["content"]["resource"]["blob"], "iVBO");
    }

    fn json_of(updates: Vec<SessionUpdate>) -> Vec<Value> {
        updates
            .into_iter()
            .map(|u| serde_json::to_value(u).unwrap())
            .collect()
    }

    fn interrupted_assistant() -> MessageRow {
        row(
            "msg_a",
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
        )
    }

    #[test]
    fn a_recovered_transcript_replays_with_the_restart_texts_once_each_its_own_paragraph() {
        let messages = vec![
            row(
                "msg_u",
                MessageKind::User,
                json!({"input_id": "i", "text": "look around"}),
            ),
            interrupted_assistant(),
            row(
                "msg_c",
                MessageKind::Synthetic,
                json!({"kind": "continuation", "text": "The server restarted…", "label": "Continuing after restart"}),
            ),
        ];
        let updates = json_of(Stream::default().replay(&messages));
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
                       "text": "↻ Session execution interrupted by server restart"}}),
                json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text",
                       "text": "\n\n↻ Continuing after restart"}}),
            ]
        );
    }

    #[test]
    fn a_cancellation_is_marked_as_one_and_a_failure_as_itself() {
        let cancelled = row(
            "msg_x",
            MessageKind::Synthetic,
            json!({"kind": "interrupted", "text": "Session execution interrupted"}),
        );
        let failed = row(
            "msg_f",
            MessageKind::Assistant,
            json!({"execution_id": "exe_2", "provider": "p", "model": "m",
            "time": {"created": 1}, "finish": "error",
            "error": {"type": "provider", "message": "upstream 500"},
            "parts": [{"id": "prt_9", "type": "text", "text": "Half"}]}),
        );
        let texts: Vec<Value> = json_of(Stream::default().replay(&[cancelled, failed]))
            .into_iter()
            .map(|u| u["content"]["text"].clone())
            .collect();
        assert_eq!(
            texts,
            vec![
                json!("⊘ Session execution interrupted"),
                json!("\n\nHalf"),
                json!("\n\nupstream 500"),
            ]
        );
    }

    #[test]
    fn a_prompt_from_elsewhere_is_shown_and_the_clients_own_starts_a_fresh_paragraph() {
        let mut stream = Stream::default();
        let text = |part: &str, text: &str| Event::StepText {
            message_id: "m".into(),
            part_id: part.into(),
            text: text.into(),
        };
        stream.event(&text("p1", "first answer"));
        // The client's prompt, with nothing streamed since it was sent.
        let sent_at = stream.texts();
        assert!(stream.prompt(&user("again"), Some(sent_at)).is_empty());
        let next = json_of(stream.event(&text("p2", "second answer")));
        assert_eq!(next[0]["content"]["text"], "second answer");
        // A continuation streamed after the client sent it: the answer is set apart.
        let sent_at = stream.texts();
        stream.event(&text("p3", "continuing"));
        stream.prompt(&user("more"), Some(sent_at));
        let next = json_of(stream.event(&text("p4", "third answer")));
        assert_eq!(next[0]["content"]["text"], "\n\nthird answer");
        // Another process's prompt is shown as a user message.
        let shown = json_of(stream.prompt(&user("from elsewhere"), None));
        assert_eq!(shown[0]["sessionUpdate"], "user_message_chunk");
        assert_eq!(shown[0]["content"]["text"], "from elsewhere");
    }

    #[test]
    fn live_text_deltas_of_one_part_join_and_a_new_part_starts_a_paragraph() {
        let mut stream = Stream::default();
        let text = |part: &str, text: &str| Event::StepText {
            message_id: "m".into(),
            part_id: part.into(),
            text: text.into(),
        };
        let sent: Vec<Value> = [text("p1", "a "), text("p1", "b"), text("p2", "c")]
            .iter()
            .flat_map(|e| stream.event(e))
            .map(|u| serde_json::to_value(u).unwrap()["content"]["text"].clone())
            .collect();
        assert_eq!(sent, vec![json!("a "), json!("b"), json!("\n\nc")]);
    }

    fn continuation() -> MessageRow {
        row(
            "msg_c",
            MessageKind::Synthetic,
            json!({"kind": "continuation", "text": "The server restarted…",
                   "label": "Continuing after restart", "execution_id": "exe_1"}),
        )
    }

    #[test]
    fn a_continuation_run_live_after_a_replay_names_the_tool_whose_outcome_is_unknown() {
        let mut stream = Stream::default();
        stream.replay(&[interrupted_assistant()]);
        let live = json_of(stream.ending(&continuation()));
        assert_eq!(
            live[0]["content"]["text"],
            "\n\n↻ Continuing after restart. Tool execution outcome unknown after server restart \
             (it was running when Steward stopped; it is not run again): `run_command sleep 300`"
        );
        // Said once.
        let again = json_of(stream.ending(&continuation()));
        assert_eq!(again[0]["content"]["text"], "↻ Continuing after restart");
        // A transcript whose continuation already ran has nothing left to say.
        let mut stream = Stream::default();
        stream.replay(&[interrupted_assistant(), continuation()]);
        assert!(stream.unknown.is_empty());
    }

    #[test]
    fn the_compaction_summary_is_a_marked_thought_and_a_prompt_s_resources_replay_as_themselves() {
        let compacted = row(
            "msg_s",
            MessageKind::Synthetic,
            json!({"kind": "compaction", "text": "The user asked for x.",
                   "label": "Compacted conversation", "through_seq": 7}),
        );
        let prompt = row(
            "msg_u",
            MessageKind::User,
            json!({"input_id": "i", "text": "see\n[a.txt](file:///w/a.txt)", "content": [
                {"type": "text", "text": "see"},
                {"type": "link", "uri": "file:///w/a.txt", "name": "a.txt"},
                {"type": "resource", "uri": "file:///w/b.rs", "text": "fn b() {}"}
            ]}),
        );
        let updates = json_of(Stream::default().replay(&[compacted, prompt]));
        assert_eq!(
            updates,
            vec![
                json!({"sessionUpdate": "agent_thought_chunk",
                       "content": {"type": "text", "text": "Compacted conversation: The user asked for x."},
                       "_meta": {"steward": {"kind": "compaction", "throughSeq": 7}}}),
                json!({"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "see"}}),
                json!({"sessionUpdate": "user_message_chunk",
                       "content": {"type": "resource_link", "uri": "file:///w/a.txt", "name": "a.txt"}}),
                json!({"sessionUpdate": "user_message_chunk",
                       "content": {"type": "resource", "resource": {"uri": "file:///w/b.rs", "text": "fn b() {}"}}}),
            ]
        );
    }

    #[test]
    fn a_live_tool_call_goes_pending_in_progress_and_a_recovery_closes_it_once() {
        let mut stream = Stream::default();
        let called = Event::ToolCalled {
            message_id: "msg_a".into(),
            part_id: "prt_2".into(),
            call_id: "call_1".into(),
            tool: "run_command".into(),
            input: json!({"command": "sleep 300"}),
        };
        let started = Event::ToolStarted {
            mcp: None,
            message_id: "msg_a".into(),
            call_id: "call_1".into(),
            process: None,
        };
        let kinds = json_of(
            [called, started]
                .iter()
                .flat_map(|e| stream.event(e))
                .collect(),
        );
        assert_eq!(kinds[0]["sessionUpdate"], "tool_call");
        assert_eq!(kinds[0]["kind"], "execute");
        assert_eq!(kinds[1]["status"], "in_progress");
        // A recovery closed it: the restart texts arrive once, from the message.
        let ended = json_of(stream.ending(&interrupted_assistant()));
        assert_eq!(ended.len(), 2, "{ended:?}");
        assert_eq!(ended[0]["status"], "failed");
        assert_eq!(
            ended[1]["content"]["text"],
            "↻ Session execution interrupted by server restart"
        );
        assert!(stream.settle(&[interrupted_assistant()]).is_empty());
    }
}
