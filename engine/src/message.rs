//! The shapes of the transcript (protocol §3.3): what a `session_message.data` holds for
//! each message type, and the exact strings recovery and cancellation write.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Recovery text when the interrupted step's provider outcome is unknown (protocol §5.4).
pub const PROVIDER_OUTCOME_UNKNOWN: &str = "Provider Step outcome unknown after server restart";
/// Recovery text otherwise (protocol §5.4).
pub const EXECUTION_INTERRUPTED_BY_RESTART: &str =
    "Session execution interrupted by server restart";
/// Tool error recovery writes for a tool left pending or running (protocol §5.4).
pub const TOOL_OUTCOME_UNKNOWN: &str = "Tool execution outcome unknown after server restart";
/// Appended to [`TOOL_OUTCOME_UNKNOWN`] when recovery found the tool's processes
/// still running and stopped them.
pub const TOOL_PROCESS_STOPPED: &str =
    "its processes were still running after the owner died and recovery stopped them";
/// Appended instead of [`TOOL_PROCESS_STOPPED`] when the owner was provably alive
/// when its claim was taken over (stopped or paused, past its lease): it did not die.
pub const TOOL_PROCESS_STOPPED_OWNER_ALIVE: &str = "its processes were still running after its owner, alive but not responding, let its lease run out, and recovery stopped them";
/// Error a user cancellation writes on the assistant (protocol §4.8).
pub const EXECUTION_INTERRUPTED: &str = "Session execution interrupted";
/// Error a user cancellation writes on a pending or running tool (protocol §4.8).
pub const TOOL_INTERRUPTED: &str = "Tool execution interrupted";
/// The continuation input's text (protocol §5.6).
pub const CONTINUATION_TEXT: &str = "The server restarted while you were working. Continue from where you left off without repeating completed work.";
/// The label the transcript shows for a continuation (protocol §5.6).
pub const CONTINUATION_LABEL: &str = "Continuing after restart";

/// `session_message.type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MessageKind {
    User,
    Assistant,
    Synthetic,
}

impl MessageKind {
    /// The stored name of the type.
    pub fn as_str(self) -> &'static str {
        match self {
            MessageKind::User => "user",
            MessageKind::Assistant => "assistant",
            MessageKind::Synthetic => "synthetic",
        }
    }

    /// The type a stored name stands for.
    pub fn parse(s: &str) -> Option<MessageKind> {
        match s {
            "user" => Some(MessageKind::User),
            "assistant" => Some(MessageKind::Assistant),
            "synthetic" => Some(MessageKind::Synthetic),
            _ => None,
        }
    }
}

/// A message's `data`, by type.
#[derive(Debug, Clone, PartialEq)]
pub enum MessageData {
    User(UserData),
    Assistant(AssistantData),
    Synthetic(SyntheticData),
}

impl MessageData {
    /// The message's type.
    pub fn kind(&self) -> MessageKind {
        match self {
            MessageData::User(_) => MessageKind::User,
            MessageData::Assistant(_) => MessageKind::Assistant,
            MessageData::Synthetic(_) => MessageKind::Synthetic,
        }
    }

    /// The JSON stored in `session_message.data`.
    pub fn to_json(&self) -> String {
        let value = match self {
            MessageData::User(d) => serde_json::to_string(d),
            MessageData::Assistant(d) => serde_json::to_string(d),
            MessageData::Synthetic(d) => serde_json::to_string(d),
        };
        value.expect("message data always serializes")
    }

    /// Decodes stored JSON of a message of type `kind`.
    pub fn from_json(kind: MessageKind, json: &str) -> serde_json::Result<MessageData> {
        Ok(match kind {
            MessageKind::User => MessageData::User(serde_json::from_str(json)?),
            MessageKind::Assistant => MessageData::Assistant(serde_json::from_str(json)?),
            MessageKind::Synthetic => MessageData::Synthetic(serde_json::from_str(json)?),
        })
    }

    /// The assistant's data, if it is one.
    pub fn as_assistant(&self) -> Option<&AssistantData> {
        match self {
            MessageData::Assistant(a) => Some(a),
            _ => None,
        }
    }

    /// The assistant's data, mutably, if it is one.
    pub fn as_assistant_mut(&mut self) -> Option<&mut AssistantData> {
        match self {
            MessageData::Assistant(a) => Some(a),
            _ => None,
        }
    }

    /// The text a reader sees for this message (assistant text parts joined).
    pub fn text(&self) -> String {
        match self {
            MessageData::User(u) => u.text.clone(),
            MessageData::Synthetic(s) => s.text.clone(),
            MessageData::Assistant(a) => a
                .parts
                .iter()
                .filter_map(|p| match p {
                    Part::Text { text, .. } => Some(text.as_str()),
                    Part::Tool { .. } | Part::Reasoning { .. } => None,
                })
                .collect(),
        }
    }
}

/// A promoted user input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserData {
    pub input_id: String,
    pub text: String,
    /// The prompt's blocks, when it carries resources (protocol §4.20).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub content: Vec<PromptBlock>,
}

/// One block of a prompt that carries resources (protocol §4.20): text, a link to a
/// resource (a file the prompt mentions), or a resource given whole.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum PromptBlock {
    Text {
        text: String,
    },
    Link {
        uri: String,
        name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        title: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
    },
    Resource {
        uri: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
        /// A text resource's text.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
        /// A binary resource's bytes, in base64.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        blob: Option<String>,
        /// How many bytes of text (or of base64) the client sent, when that was
        /// more than a prompt keeps ([`MAX_RESOURCE_BYTES`]): the text is cut
        /// there, the blob is not kept.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        size: Option<u64>,
    },
}

/// The most of an embedded resource a prompt keeps, its text or its blob in base64
/// (protocol §4.20): as much as a linked file may bring.
pub const MAX_RESOURCE_BYTES: usize = crate::tools::fs::MAX_LINKED_BYTES as usize;

impl PromptBlock {
    /// The prompt's text for readers that show text: its text blocks as they are, a
    /// link as `[name](uri)`, a resource as `[uri](uri)`, one block a line.
    pub fn text_of(blocks: &[PromptBlock]) -> String {
        blocks
            .iter()
            .map(|b| match b {
                PromptBlock::Text { text } => text.clone(),
                PromptBlock::Link { uri, name, .. } => format!("[{name}]({uri})"),
                PromptBlock::Resource { uri, .. } => format!("[{uri}]({uri})"),
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The blocks of a prompt as they are kept and sent (protocol §4.20): an
    /// embedded resource's text with the values of the variables `hidden` names
    /// (the provider's API key) redacted, then cut at [`MAX_RESOURCE_BYTES`] (at a
    /// character boundary); a blob longer than that not kept. `size` says how large
    /// what was cut or left out was. Keeping kept blocks changes nothing.
    pub fn kept(blocks: &[PromptBlock], hidden: &[String]) -> Vec<PromptBlock> {
        blocks
            .iter()
            .map(|block| match block {
                PromptBlock::Resource {
                    uri,
                    mime_type,
                    text,
                    blob,
                    size,
                } => {
                    let mut size = *size;
                    let text = text.as_ref().map(|text| {
                        let mut text = crate::tools::scrub_secrets(text.clone(), hidden);
                        if text.len() > MAX_RESOURCE_BYTES {
                            size = Some(text.len() as u64);
                            let mut end = MAX_RESOURCE_BYTES;
                            while !text.is_char_boundary(end) {
                                end -= 1;
                            }
                            text.truncate(end);
                        }
                        text
                    });
                    let blob = match blob {
                        Some(b) if b.len() > MAX_RESOURCE_BYTES => {
                            size = Some(b.len() as u64);
                            None
                        }
                        other => other.clone(),
                    };
                    PromptBlock::Resource {
                        uri: uri.clone(),
                        mime_type: mime_type.clone(),
                        text,
                        blob,
                        size,
                    }
                }
                other => other.clone(),
            })
            .collect()
    }

    /// Whether a prompt of these blocks needs them kept (it carries a resource):
    /// text alone is kept as text.
    pub fn carry_resources(blocks: &[PromptBlock]) -> bool {
        blocks
            .iter()
            .any(|b| !matches!(b, PromptBlock::Text { .. }))
    }
}

/// Why a synthetic message exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SyntheticKind {
    /// Recovery reconciled an execution that had no assistant yet.
    Recovery,
    /// The continuation input recovery admitted, once promoted.
    Continuation,
    /// A user cancellation of an execution that had no assistant yet.
    Interrupted,
    /// A compaction summary that stands for everything before it.
    Compaction,
    /// The user chose the provider and model the session runs on from here.
    Model,
}

/// A message the engine wrote on its own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SyntheticData {
    pub kind: SyntheticKind,
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_id: Option<String>,
    /// For compaction: the last event seq the summary covers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub through_seq: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<crate::phase::Phase>,
    /// For a model choice: the provider and model chosen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// Why a step finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Finish {
    Stop,
    ToolCalls,
    Length,
    ContentFilter,
    Error,
}

impl Finish {
    /// The stored name: `stop`, `tool-calls`, `length`, `content-filter`, `error`.
    pub fn as_str(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::ToolCalls => "tool-calls",
            Finish::Length => "length",
            Finish::ContentFilter => "content-filter",
            Finish::Error => "error",
        }
    }
}

/// When an assistant message was created and completed (ms since the epoch).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageTime {
    pub created: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed: Option<i64>,
}

/// `error {type, message}` on an assistant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageError {
    #[serde(rename = "type")]
    pub kind: String,
    pub message: String,
    /// For a provider error: what kind (`rate_limited`, `overloaded`,
    /// `context_too_long`, `authentication`, `other`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Tokens a step used, as the provider reported them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Input tokens read from the provider's prompt cache.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_read_tokens: u64,
    /// Input tokens written to the provider's prompt cache.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write_tokens: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// An assistant message (protocol §3.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AssistantData {
    pub execution_id: String,
    pub provider: String,
    pub model: String,
    pub time: MessageTime,
    #[serde(default)]
    pub finish: Option<Finish>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<MessageError>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    pub parts: Vec<Part>,
    /// MCP servers whose tools the step could not offer, and why (protocol §4.16).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unavailable: Vec<Unavailable>,
    /// What the provider's answer suggests went wrong without failing the step (a
    /// prompt cut at the model's context window).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// An MCP server whose tools (or one of them) a step could not offer, and why:
/// `error` reads after the server's name ("did not start: …").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unavailable {
    pub server: String,
    pub error: String,
}

impl AssistantData {
    /// The tool part of call `call_id`, mutably.
    pub fn tool_mut(&mut self, call_id: &str) -> Option<&mut ToolPart> {
        self.parts.iter_mut().find_map(|p| match p {
            Part::Tool(t) if t.call_id == call_id => Some(t),
            _ => None,
        })
    }

    /// The text of each text part, in order.
    pub fn text_parts(&self) -> Vec<&str> {
        self.parts
            .iter()
            .filter_map(|p| match p {
                Part::Text { text, .. } => Some(text.as_str()),
                Part::Tool(_) | Part::Reasoning { .. } => None,
            })
            .collect()
    }

    /// The tool parts, in order.
    pub fn tools(&self) -> impl Iterator<Item = &ToolPart> {
        self.parts.iter().filter_map(|p| match p {
            Part::Tool(t) => Some(t),
            Part::Text { .. } | Part::Reasoning { .. } => None,
        })
    }

    /// The reasoning parts, in order.
    pub fn reasoning(&self) -> impl Iterator<Item = Reasoning> + '_ {
        self.parts.iter().filter_map(|p| match p {
            Part::Reasoning {
                text,
                signature,
                redacted,
                ..
            } => Some(Reasoning {
                text: text.clone(),
                signature: signature.clone(),
                redacted: redacted.clone(),
            }),
            _ => None,
        })
    }
}

/// What a model reasoned before it answered (Anthropic's `thinking`), kept to be
/// sent back as the API requires: its text and signature, or a redacted block.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Reasoning {
    pub text: String,
    pub signature: Option<String>,
    /// A redacted block's opaque data (its text is empty).
    pub redacted: Option<String>,
}

/// One ordered part of an assistant message, tagged by `type` (`text` | `tool` |
/// `reasoning`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
#[serde(try_from = "RawPart")]
#[allow(clippy::large_enum_variant)] // most parts of a step are tools; boxing buys nothing
pub enum Part {
    Text {
        id: String,
        text: String,
    },
    Tool(ToolPart),
    Reasoning {
        id: String,
        text: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        redacted: Option<String>,
    },
}

/// A part as stored, read field by field: serde's internally tagged enums buffer
/// every part before deciding its variant, which made decoding transcripts (and so
/// recovery) several times slower.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPart {
    id: String,
    #[serde(rename = "type")]
    kind: String,
    text: Option<String>,
    call_id: Option<String>,
    tool: Option<String>,
    state: Option<ToolState>,
    signature: Option<String>,
    redacted: Option<String>,
}

impl TryFrom<RawPart> for Part {
    type Error = String;

    fn try_from(raw: RawPart) -> Result<Part, String> {
        let reasoning_fields = raw.signature.is_some() || raw.redacted.is_some();
        match (
            raw.kind.as_str(),
            raw.text,
            raw.call_id,
            raw.tool,
            raw.state,
        ) {
            ("text", Some(text), None, None, None) if !reasoning_fields => {
                Ok(Part::Text { id: raw.id, text })
            }
            ("tool", None, Some(call_id), Some(tool), Some(state)) if !reasoning_fields => {
                Ok(Part::Tool(ToolPart {
                    id: raw.id,
                    call_id,
                    tool,
                    state,
                }))
            }
            ("reasoning", Some(text), None, None, None) => Ok(Part::Reasoning {
                id: raw.id,
                text,
                signature: raw.signature,
                redacted: raw.redacted,
            }),
            (kind, ..) => Err(format!(
                "part {} of type {kind:?} has the wrong fields",
                raw.id
            )),
        }
    }
}

/// A tool call and its state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolPart {
    pub id: String,
    pub call_id: String,
    pub tool: String,
    pub state: ToolState,
}

/// Where a tool call stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolStatus {
    Pending,
    Running,
    Completed,
    Error,
}

impl ToolStatus {
    /// The stored name: `pending`, `running`, `completed`, `error`.
    pub fn as_str(self) -> &'static str {
        match self {
            ToolStatus::Pending => "pending",
            ToolStatus::Running => "running",
            ToolStatus::Completed => "completed",
            ToolStatus::Error => "error",
        }
    }

    /// Pending or running: the call has no result yet.
    pub fn is_open(self) -> bool {
        matches!(self, ToolStatus::Pending | ToolStatus::Running)
    }
}

/// When a tool call ran (ms since the epoch).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolTime {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<i64>,
}

/// Who a tool's process is, so that nothing else is ever mistaken for it: the pid,
/// its process group, and its start time in clock ticks since boot from
/// `/proc/<pid>/stat` on this boot of this host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessIdentity {
    pub pid: i32,
    pub pgid: i32,
    pub start_time: u64,
    pub boot_id: String,
    pub hostname: String,
}

/// An MCP `tools/call` as it was sent (protocol §4.16): committed in `tool.started`
/// before the request leaves, so a crash can never leave a call sent but unrecorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpCall {
    /// The server's name (`[mcp.servers.NAME]`, or an ACP client's).
    pub server: String,
    /// The server's settings' fingerprint: which server this was, exactly.
    pub fingerprint: String,
    /// The tool's own name on the server.
    pub tool: String,
    /// The JSON-RPC request id the call is sent under.
    pub request_id: Value,
    /// The arguments sent (the call's input); kept in `tool.started` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
}

/// `state` of a tool part: `status` plus what that status allows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolState {
    pub status: ToolStatus,
    /// The call's arguments; a raw string while they are not valid JSON.
    pub input: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Vec<Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<ToolTime>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<ProcessIdentity>,
    /// For an MCP tool: the server, tool and request it was sent as.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp: Option<Box<McpCall>>,
}

impl ToolState {
    /// A call not yet started, with its input.
    pub fn pending(input: Value) -> ToolState {
        ToolState {
            status: ToolStatus::Pending,
            input,
            output: None,
            structured: None,
            content: None,
            error: None,
            time: None,
            process: None,
            mcp: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    #[test]
    fn r3_3_assistant_data_has_the_documented_shape() {
        let data = AssistantData {
            warnings: Vec::new(),
            unavailable: Vec::new(),
            execution_id: "exe_1".into(),
            provider: "scripted".into(),
            model: "demo".into(),
            time: MessageTime {
                created: 10,
                completed: Some(20),
            },
            finish: Some(Finish::ToolCalls),
            error: None,
            usage: Some(Usage {
                input_tokens: 3,
                output_tokens: 4,
                ..Usage::default()
            }),
            parts: vec![
                Part::Text {
                    id: "prt_1".into(),
                    text: "hi".into(),
                },
                Part::Tool(ToolPart {
                    id: "prt_2".into(),
                    call_id: "call_1".into(),
                    tool: "list_dir".into(),
                    state: ToolState::pending(json!({"path": "."})),
                }),
            ],
        };
        let value: Value =
            serde_json::from_str(&MessageData::Assistant(data.clone()).to_json()).unwrap();
        assert_eq!(
            value,
            json!({
                "execution_id": "exe_1", "provider": "scripted", "model": "demo",
                "time": {"created": 10, "completed": 20},
                "finish": "tool-calls",
                "usage": {"input_tokens": 3, "output_tokens": 4},
                "parts": [
                    {"id": "prt_1", "type": "text", "text": "hi"},
                    {"id": "prt_2", "type": "tool", "call_id": "call_1", "tool": "list_dir",
                     "state": {"status": "pending", "input": {"path": "."}}}
                ]
            })
        );
        let back = MessageData::from_json(MessageKind::Assistant, &value.to_string()).unwrap();
        assert_eq!(back, MessageData::Assistant(data));
    }
}
