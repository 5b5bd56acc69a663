//! Event types (protocol §3.2): the durable, append-only log every session change goes
//! through. `type` is stored in its own column and the payload in `data`; a type is
//! never reused for another meaning.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, Result};
pub use crate::message::Unavailable;
use crate::message::{Finish, McpCall, MessageError, ProcessIdentity, Usage};
use crate::phase::Phase;

/// How an input asks to be run (protocol §2.5 `session_input.delivery`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Delivery {
    /// Wake the session now.
    Queue,
    /// Only store it; it is promoted with the next run.
    Admit,
}

impl Delivery {
    /// The stored name: `queue` or `admit`.
    pub fn as_str(self) -> &'static str {
        match self {
            Delivery::Queue => "queue",
            Delivery::Admit => "admit",
        }
    }

    /// The delivery a stored name stands for.
    pub fn parse(s: &str) -> Option<Delivery> {
        match s {
            "queue" => Some(Delivery::Queue),
            "admit" => Some(Delivery::Admit),
            _ => None,
        }
    }
}

/// The tools a step offered the model: the hash of their specs as sent (the specs
/// themselves are kept once per hash in `tool_list`), and the MCP servers whose
/// tools are missing because they could not be started or listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OfferedTools {
    pub hash: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unavailable: Vec<Unavailable>,
}

/// One change to a session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "data")]
pub enum Event {
    #[serde(rename = "session.created")]
    SessionCreated { title: String, directory: String },

    /// An input was stored, pending. `wake_pending` is the durable "run me" flag
    /// (false for `admit` and for continuations, whose wake lives in
    /// `session_recovery`). `continuation_of` names the recovered execution.
    #[serde(rename = "input.admitted")]
    InputAdmitted {
        input_id: String,
        prompt: String,
        /// The prompt's blocks, when it carries resources (protocol §4.20).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        content: Vec<crate::message::PromptBlock>,
        delivery: Delivery,
        wake_pending: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        continuation_of: Option<String>,
    },

    /// A pending input became a message of the transcript.
    #[serde(rename = "input.promoted")]
    InputPromoted {
        input_id: String,
        message_id: String,
    },

    /// A provider step began: a new assistant message.
    #[serde(rename = "step.started")]
    StepStarted {
        message_id: String,
        execution_id: String,
        provider: String,
        model: String,
        /// The tools the step offers the model (protocol §4.16).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tools: Option<OfferedTools>,
    },

    /// Coalesced streamed text appended to a text part.
    #[serde(rename = "step.text")]
    StepText {
        message_id: String,
        part_id: String,
        text: String,
    },

    /// A tool call the provider asked for, not yet started.
    #[serde(rename = "tool.called")]
    ToolCalled {
        message_id: String,
        part_id: String,
        call_id: String,
        tool: String,
        input: Value,
    },

    /// The tool was dispatched; `process` names its process group when it has one
    /// (an MCP stdio server's), `mcp` the request an MCP call is sent as.
    #[serde(rename = "tool.started")]
    ToolStarted {
        message_id: String,
        call_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        process: Option<ProcessIdentity>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mcp: Option<Box<McpCall>>,
    },

    #[serde(rename = "tool.completed")]
    ToolCompleted {
        message_id: String,
        call_id: String,
        output: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        structured: Option<Value>,
    },

    #[serde(rename = "tool.failed")]
    ToolFailed {
        message_id: String,
        call_id: String,
        error: String,
    },

    /// The provider stream finished; the claim goes back to `ready` in this commit.
    #[serde(rename = "step.ended")]
    StepEnded {
        message_id: String,
        finish: Finish,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<Usage>,
        /// What the answer suggests went wrong without failing the step.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        warnings: Vec<String>,
    },

    /// One whole block of the model's reasoning, with the signature that must go
    /// back with it (or a redacted block's data).
    #[serde(rename = "step.reasoning")]
    StepReasoning {
        message_id: String,
        part_id: String,
        text: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        redacted: Option<String>,
    },

    /// The user chose the provider and model the session runs on from here
    /// (protocol §4.17): a synthetic message says so.
    #[serde(rename = "model.chosen")]
    ModelChosen {
        message_id: String,
        provider: String,
        model: String,
        /// What the session ran on before, as `provider/model`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        previous: Option<String>,
    },

    /// The provider failed for good (after bounded retries).
    #[serde(rename = "step.failed")]
    StepFailed {
        message_id: String,
        error: MessageError,
    },

    /// The user cancelled the execution (protocol §4.8).
    #[serde(rename = "step.interrupted")]
    StepInterrupted {
        execution_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message_id: Option<String>,
    },

    /// Recovery reconciled an interrupted execution (protocol §5.3, §5.4).
    /// `stopped_tools` lists the calls whose leftover processes recovery stopped;
    /// `owner_alive` says their owner was provably alive (stopped or paused past its
    /// lease) rather than dead.
    #[serde(rename = "step.recovered")]
    StepRecovered {
        execution_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        assistant_message_id: Option<String>,
        phase: Phase,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        stopped_tools: Vec<String>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        owner_alive: bool,
    },

    #[serde(rename = "compaction.started")]
    CompactionStarted {
        execution_id: String,
        message_id: String,
    },

    /// The summary that stands for every event up to `through_seq`.
    #[serde(rename = "compaction.ended")]
    CompactionEnded {
        message_id: String,
        summary: String,
        through_seq: i64,
    },

    /// A user action from the inspector (wake, discard), kept in the session's log.
    #[serde(rename = "inspector.action")]
    InspectorAction {
        action: String,
        execution_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
    },

    /// The user gave the session a new title (protocol §3.6).
    #[serde(rename = "session.renamed")]
    SessionRenamed { title: String },

    /// The user archived the session, or brought it back (protocol §3.6).
    #[serde(rename = "session.archived")]
    SessionArchived { archived: bool },
}

impl Event {
    /// The `type` column.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::SessionCreated { .. } => "session.created",
            Event::InputAdmitted { .. } => "input.admitted",
            Event::InputPromoted { .. } => "input.promoted",
            Event::StepStarted { .. } => "step.started",
            Event::StepText { .. } => "step.text",
            Event::ToolCalled { .. } => "tool.called",
            Event::ToolStarted { .. } => "tool.started",
            Event::ToolCompleted { .. } => "tool.completed",
            Event::ToolFailed { .. } => "tool.failed",
            Event::StepEnded { .. } => "step.ended",
            Event::StepFailed { .. } => "step.failed",
            Event::StepInterrupted { .. } => "step.interrupted",
            Event::StepRecovered { .. } => "step.recovered",
            Event::CompactionStarted { .. } => "compaction.started",
            Event::CompactionEnded { .. } => "compaction.ended",
            Event::InspectorAction { .. } => "inspector.action",
            Event::StepReasoning { .. } => "step.reasoning",
            Event::ModelChosen { .. } => "model.chosen",
            Event::SessionRenamed { .. } => "session.renamed",
            Event::SessionArchived { .. } => "session.archived",
        }
    }

    /// The `data` column: the payload without its type. Serialized straight to text
    /// (`{"type":"<kind>","data":<payload>}`, then the payload cut out) rather than
    /// through a `Value` tree, since every commit pays for it.
    pub fn data_json(&self) -> String {
        let whole = serde_json::to_string(self).expect("events always serialize");
        let prefix = format!(r#"{{"type":"{}","data":"#, self.kind());
        match whole
            .strip_prefix(&prefix)
            .and_then(|rest| rest.strip_suffix('}'))
        {
            Some(data) => data.to_string(),
            None => unreachable!("adjacently tagged events serialize as {{type, data}}: {whole}"),
        }
    }

    /// Decodes a stored row.
    pub fn from_row(kind: &str, data: &str) -> Result<Event> {
        let data: Value = serde_json::from_str(data)
            .map_err(|e| Error::corrupt(format!("event {kind}: invalid JSON: {e}")))?;
        serde_json::from_value(serde_json::json!({ "type": kind, "data": data }))
            .map_err(|e| Error::corrupt(format!("event {kind}: {e}")))
    }
}

/// The write identity an event was committed under (protocol §4.4): which owner, which
/// execution, at which epoch. Admissions from users carry none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub owner_id: String,
    pub execution_id: String,
    pub epoch: i64,
}

/// An event as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct EventRecord {
    pub session_id: String,
    pub seq: i64,
    pub time_created: i64,
    pub origin: Option<Origin>,
    pub event: Event,
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn r3_2_events_store_type_and_payload_apart() {
        let event = Event::InputAdmitted {
            content: Vec::new(),
            input_id: "inp_1".into(),
            prompt: "hello".into(),
            delivery: Delivery::Queue,
            wake_pending: true,
            continuation_of: None,
        };
        assert_eq!(event.kind(), "input.admitted");
        let data = event.data_json();
        assert_eq!(
            data,
            r#"{"input_id":"inp_1","prompt":"hello","delivery":"queue","wake_pending":true}"#
        );
        assert_eq!(Event::from_row("input.admitted", &data).unwrap(), event);
    }

    #[test]
    fn unknown_or_broken_events_are_reported_not_guessed() {
        assert!(matches!(
            Event::from_row("step.exploded", "{}"),
            Err(Error::Corrupt(_))
        ));
        assert!(matches!(
            Event::from_row("step.text", "{not json"),
            Err(Error::Corrupt(_))
        ));
    }
}
