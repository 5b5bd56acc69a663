//! Projections as pure folds (protocol §3.1): `apply(&mut Projection, &EventRecord)`
//! turns one event into rows of `session`, `session_message` and `session_input`.
//!
//! The store loads only the rows an event touches ([`needs`]), applies the event and
//! writes back what it touched, in the event's own transaction. `doctor` folds a whole
//! log into an empty [`Projection`] and compares: the tables must equal the replay.
//! Nothing here reads a clock or a database.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::events::{Delivery, Event, EventRecord};
use crate::ids;
use crate::message::{
    AssistantData, CONTINUATION_LABEL, EXECUTION_INTERRUPTED, EXECUTION_INTERRUPTED_BY_RESTART,
    Finish, McpCall, MessageData, MessageError, MessageTime, PROVIDER_OUTCOME_UNKNOWN, Part,
    SyntheticData, SyntheticKind, TOOL_INTERRUPTED, TOOL_OUTCOME_UNKNOWN, TOOL_PROCESS_STOPPED,
    TOOL_PROCESS_STOPPED_OWNER_ALIVE, ToolPart, ToolState, ToolStatus, ToolTime, UserData,
};
use crate::phase::Phase;

/// A `session` row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRow {
    pub id: String,
    pub title: String,
    pub directory: String,
    pub time_created: i64,
    pub time_updated: i64,
    /// Left out of the lists unless asked for (protocol §3.6).
    pub archived: bool,
}

/// A `session_message` row.
#[derive(Debug, Clone, PartialEq)]
pub struct MessageRow {
    pub id: String,
    pub session_id: String,
    pub seq: i64,
    pub time_created: i64,
    pub time_updated: i64,
    pub data: MessageData,
}

/// A `session_input` row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputRow {
    pub id: String,
    pub session_id: String,
    pub prompt: String,
    /// The prompt's blocks, when it carries resources (protocol §4.20).
    pub content: Vec<crate::message::PromptBlock>,
    pub delivery: Delivery,
    pub admitted_seq: i64,
    pub promoted_seq: Option<i64>,
    pub wake_pending: bool,
    pub time_created: i64,
}

impl InputRow {
    /// Admitted and not yet promoted.
    pub fn is_pending(&self) -> bool {
        self.promoted_seq.is_none()
    }
}

/// Which rows a fold changed since the last [`Projection::take_touched`].
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Touched {
    pub session: bool,
    pub messages: BTreeSet<String>,
    pub inputs: BTreeSet<String>,
}

/// The rows of one session: all of them (replay) or just those an event touches.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Projection {
    pub session: Option<SessionRow>,
    pub messages: BTreeMap<String, MessageRow>,
    pub inputs: BTreeMap<String, InputRow>,
    touched: Touched,
}

/// An event the projection cannot apply; its transaction must roll back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot apply {kind} at seq {seq}: {reason}")]
pub struct ProjectionError {
    pub kind: &'static str,
    pub seq: i64,
    pub reason: String,
}

/// The stored rows an event changes besides its session row. Rows an event creates
/// are not read first: the tables' primary keys refuse a duplicate.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Needs {
    pub messages: Vec<String>,
    pub inputs: Vec<String>,
}

/// What the store must load before applying `event`.
pub fn needs(event: &Event) -> Needs {
    let mut needs = Needs::default();
    match event {
        Event::SessionCreated { .. }
        | Event::SessionRenamed { .. }
        | Event::SessionArchived { .. }
        | Event::InspectorAction { .. }
        | Event::CompactionStarted { .. }
        | Event::InputAdmitted { .. }
        | Event::StepStarted { .. }
        | Event::ModelChosen { .. }
        | Event::CompactionEnded { .. } => {}
        Event::InputPromoted { input_id, .. } => needs.inputs.push(input_id.clone()),
        Event::StepText { message_id, .. }
        | Event::StepReasoning { message_id, .. }
        | Event::ToolCalled { message_id, .. }
        | Event::ToolStarted { message_id, .. }
        | Event::ToolCompleted { message_id, .. }
        | Event::ToolFailed { message_id, .. }
        | Event::StepEnded { message_id, .. }
        | Event::StepFailed { message_id, .. } => needs.messages.push(message_id.clone()),
        Event::StepInterrupted { message_id, .. } => needs.messages.extend(message_id.clone()),
        Event::StepRecovered {
            assistant_message_id,
            ..
        } => needs.messages.extend(assistant_message_id.clone()),
    }
    needs
}

impl Projection {
    /// Hands back the set of changed rows and starts a new one.
    pub fn take_touched(&mut self) -> Touched {
        std::mem::take(&mut self.touched)
    }

    /// Messages in transcript order.
    pub fn ordered_messages(&self) -> Vec<&MessageRow> {
        let mut messages: Vec<_> = self.messages.values().collect();
        messages.sort_by_key(|m| m.seq);
        messages
    }
}

/// Applies one event. Pure: the result depends only on `p` and `e`.
#[doc(hidden)]
pub fn apply(p: &mut Projection, e: &EventRecord) -> Result<(), ProjectionError> {
    let fail = |reason: String| ProjectionError {
        kind: e.event.kind(),
        seq: e.seq,
        reason,
    };
    if let Event::SessionCreated { title, directory } = &e.event {
        if p.session.is_some() {
            return Err(fail("the session already exists".into()));
        }
        p.session = Some(SessionRow {
            id: e.session_id.clone(),
            title: title.clone(),
            directory: directory.clone(),
            time_created: e.time_created,
            time_updated: e.time_created,
            archived: false,
        });
        p.touched.session = true;
        return Ok(());
    }
    let session = p
        .session
        .as_mut()
        .ok_or_else(|| fail(format!("session {} does not exist", e.session_id)))?;
    session.time_updated = e.time_created;
    match &e.event {
        Event::SessionRenamed { title } => session.title = title.clone(),
        Event::SessionArchived { archived } => session.archived = *archived,
        _ => {}
    }
    p.touched.session = true;
    Fold { p, e }.apply().map_err(fail)
}

struct Fold<'a> {
    p: &'a mut Projection,
    e: &'a EventRecord,
}

type FoldResult = Result<(), String>;

impl Fold<'_> {
    fn apply(mut self) -> FoldResult {
        let e = self.e;
        match &e.event {
            Event::SessionCreated { .. } => unreachable!("handled by apply"),
            Event::InspectorAction { .. }
            | Event::CompactionStarted { .. }
            | Event::SessionRenamed { .. }
            | Event::SessionArchived { .. } => Ok(()),
            Event::InputAdmitted {
                input_id,
                prompt,
                content,
                delivery,
                wake_pending,
                continuation_of,
            } => self.admit(
                input_id,
                prompt,
                content,
                *delivery,
                *wake_pending,
                continuation_of,
            ),
            Event::InputPromoted {
                input_id,
                message_id,
            } => self.promote(input_id, message_id),
            Event::StepStarted {
                message_id,
                execution_id,
                provider,
                model,
                tools,
            } => {
                let data = MessageData::Assistant(AssistantData {
                    warnings: Vec::new(),
                    execution_id: execution_id.clone(),
                    provider: provider.clone(),
                    model: model.clone(),
                    time: MessageTime {
                        created: e.time_created,
                        completed: None,
                    },
                    finish: None,
                    error: None,
                    usage: None,
                    parts: Vec::new(),
                    unavailable: tools
                        .as_ref()
                        .map(|t| t.unavailable.clone())
                        .unwrap_or_default(),
                });
                self.insert_message(message_id, data)
            }
            Event::StepText {
                message_id,
                part_id,
                text,
            } => self.assistant(message_id, |a| {
                let existing = a.parts.iter_mut().find_map(|part| match part {
                    Part::Text { id, text } if id == part_id => Some(text),
                    _ => None,
                });
                match existing {
                    Some(existing) => existing.push_str(text),
                    None => a.parts.push(Part::Text {
                        id: part_id.clone(),
                        text: text.clone(),
                    }),
                }
                Ok(())
            }),
            Event::ToolCalled {
                message_id,
                part_id,
                call_id,
                tool,
                input,
            } => self.assistant(message_id, |a| {
                if a.tool_mut(call_id).is_some() {
                    return Err(format!("tool call {call_id} already exists"));
                }
                a.parts.push(Part::Tool(ToolPart {
                    id: part_id.clone(),
                    call_id: call_id.clone(),
                    tool: tool.clone(),
                    state: ToolState::pending(input.clone()),
                }));
                Ok(())
            }),
            Event::ToolStarted {
                message_id,
                call_id,
                process,
                mcp,
            } => self.tool(message_id, call_id, &[ToolStatus::Pending], |t, now| {
                t.status = ToolStatus::Running;
                t.time = Some(ToolTime {
                    start: Some(now),
                    end: None,
                });
                t.process = process.clone();
                // The arguments are the call's input already.
                t.mcp = mcp.as_deref().map(|call| {
                    Box::new(McpCall {
                        arguments: None,
                        ..call.clone()
                    })
                });
            }),
            Event::ToolCompleted {
                message_id,
                call_id,
                output,
                structured,
            } => self.tool(message_id, call_id, &[ToolStatus::Running], |t, now| {
                t.status = ToolStatus::Completed;
                t.output = Some(output.clone());
                t.structured = structured.clone();
                t.time.get_or_insert_with(ToolTime::default).end = Some(now);
            }),
            Event::ToolFailed {
                message_id,
                call_id,
                error,
            } => self.tool(
                message_id,
                call_id,
                &[ToolStatus::Pending, ToolStatus::Running],
                |t, now| {
                    t.status = ToolStatus::Error;
                    t.error = Some(error.clone());
                    t.time.get_or_insert_with(ToolTime::default).end = Some(now);
                },
            ),
            Event::StepReasoning {
                message_id,
                part_id,
                text,
                signature,
                redacted,
            } => self.assistant(message_id, |a| {
                if a.parts
                    .iter()
                    .any(|p| matches!(p, Part::Reasoning { id, .. } if id == part_id))
                {
                    return Err(format!("reasoning part {part_id} already exists"));
                }
                a.parts.push(Part::Reasoning {
                    id: part_id.clone(),
                    text: text.clone(),
                    signature: signature.clone(),
                    redacted: redacted.clone(),
                });
                Ok(())
            }),
            Event::ModelChosen {
                message_id,
                provider,
                model,
                previous,
            } => {
                let text = match previous {
                    Some(previous) => {
                        format!("Model switched to {provider}/{model} (was {previous})")
                    }
                    None => format!("Model set to {provider}/{model}"),
                };
                self.insert_message(
                    message_id,
                    MessageData::Synthetic(SyntheticData {
                        kind: SyntheticKind::Model,
                        text,
                        label: Some("Model chosen".into()),
                        execution_id: None,
                        input_id: None,
                        through_seq: None,
                        phase: None,
                        provider: Some(provider.clone()),
                        model: Some(model.clone()),
                    }),
                )
            }
            Event::StepEnded {
                message_id,
                finish,
                usage,
                warnings,
            } => {
                let now = e.time_created;
                self.assistant(message_id, |a| {
                    a.finish = Some(*finish);
                    a.usage = *usage;
                    a.warnings = warnings.clone();
                    a.time.completed = Some(now);
                    Ok(())
                })
            }
            Event::StepFailed { message_id, error } => {
                let now = e.time_created;
                self.assistant(message_id, |a| {
                    a.finish = Some(Finish::Error);
                    a.error = Some(error.clone());
                    a.time.completed = Some(now);
                    Ok(())
                })
            }
            Event::StepInterrupted {
                execution_id,
                message_id,
            } => self.interrupt(execution_id, message_id.as_deref()),
            Event::StepRecovered {
                execution_id,
                assistant_message_id,
                phase,
                stopped_tools,
                owner_alive,
            } => self.recover(
                execution_id,
                assistant_message_id.as_deref(),
                *phase,
                stopped_tools,
                *owner_alive,
            ),
            Event::CompactionEnded {
                message_id,
                summary,
                through_seq,
            } => self.insert_message(
                message_id,
                MessageData::Synthetic(SyntheticData {
                    provider: None,
                    model: None,
                    kind: SyntheticKind::Compaction,
                    text: summary.clone(),
                    label: Some("Compacted conversation".into()),
                    execution_id: None,
                    input_id: None,
                    through_seq: Some(*through_seq),
                    phase: None,
                }),
            ),
        }
    }

    fn admit(
        &mut self,
        input_id: &str,
        prompt: &str,
        content: &[crate::message::PromptBlock],
        delivery: Delivery,
        wake_pending: bool,
        continuation_of: &Option<String>,
    ) -> FoldResult {
        if self.p.inputs.contains_key(input_id) {
            return Err(format!("input {input_id} already exists"));
        }
        match (continuation_of, ids::continuation_execution(input_id)) {
            (Some(exe), Some(derived)) if exe == derived => {}
            (None, None) => {}
            _ => {
                return Err(format!(
                    "input {input_id} does not match its continuation execution {continuation_of:?}"
                ));
            }
        }
        let e = self.e;
        self.p.inputs.insert(
            input_id.to_string(),
            InputRow {
                id: input_id.to_string(),
                session_id: e.session_id.clone(),
                prompt: prompt.to_string(),
                content: content.to_vec(),
                delivery,
                admitted_seq: e.seq,
                promoted_seq: None,
                wake_pending,
                time_created: e.time_created,
            },
        );
        self.p.touched.inputs.insert(input_id.to_string());
        Ok(())
    }

    fn promote(&mut self, input_id: &str, message_id: &str) -> FoldResult {
        let seq = self.e.seq;
        let session_id = &self.e.session_id;
        let input = self
            .p
            .inputs
            .get_mut(input_id)
            .filter(|i| &i.session_id == session_id)
            .ok_or_else(|| format!("input {input_id} is not in session {session_id}"))?;
        if !input.is_pending() {
            return Err(format!("input {input_id} was already promoted"));
        }
        input.promoted_seq = Some(seq);
        input.wake_pending = false;
        let data = match ids::continuation_execution(input_id) {
            Some(exe) => MessageData::Synthetic(SyntheticData {
                provider: None,
                model: None,
                kind: SyntheticKind::Continuation,
                text: input.prompt.clone(),
                label: Some(CONTINUATION_LABEL.into()),
                execution_id: Some(exe.to_string()),
                input_id: Some(input_id.to_string()),
                through_seq: None,
                phase: None,
            }),
            None => MessageData::User(UserData {
                input_id: input_id.to_string(),
                text: input.prompt.clone(),
                content: input.content.clone(),
            }),
        };
        self.p.touched.inputs.insert(input_id.to_string());
        self.insert_message(message_id, data)
    }

    fn interrupt(&mut self, execution_id: &str, message_id: Option<&str>) -> FoldResult {
        let Some(message_id) = message_id else {
            let id = ids::interrupted_message(execution_id);
            return self.insert_message(
                &id,
                MessageData::Synthetic(SyntheticData {
                    provider: None,
                    model: None,
                    kind: SyntheticKind::Interrupted,
                    text: EXECUTION_INTERRUPTED.into(),
                    label: None,
                    execution_id: Some(execution_id.to_string()),
                    input_id: None,
                    through_seq: None,
                    phase: None,
                }),
            );
        };
        let now = self.e.time_created;
        self.assistant(message_id, |a| {
            a.finish = Some(Finish::Error);
            a.error = Some(MessageError {
                reason: None,
                kind: "interrupted".into(),
                message: EXECUTION_INTERRUPTED.into(),
            });
            a.time.completed.get_or_insert(now);
            for part in &mut a.parts {
                if let Part::Tool(t) = part
                    && t.state.status.is_open()
                {
                    t.state.status = ToolStatus::Error;
                    t.state.error = Some(TOOL_INTERRUPTED.into());
                    t.state.time.get_or_insert_with(ToolTime::default).end = Some(now);
                }
            }
            Ok(())
        })
    }

    fn recover(
        &mut self,
        execution_id: &str,
        assistant_message_id: Option<&str>,
        phase: Phase,
        stopped_tools: &[String],
        owner_alive: bool,
    ) -> FoldResult {
        let text = match phase {
            Phase::Unknown => PROVIDER_OUTCOME_UNKNOWN,
            Phase::Ready | Phase::Safe => EXECUTION_INTERRUPTED_BY_RESTART,
        };
        let Some(message_id) = assistant_message_id else {
            let id = ids::recovery_message(execution_id);
            return self.insert_message(
                &id,
                MessageData::Synthetic(SyntheticData {
                    provider: None,
                    model: None,
                    kind: SyntheticKind::Recovery,
                    text: text.into(),
                    label: None,
                    execution_id: Some(execution_id.to_string()),
                    input_id: None,
                    through_seq: None,
                    phase: Some(phase),
                }),
            );
        };
        let now = self.e.time_created;
        let part_id = ids::recovery_part(execution_id);
        self.assistant(message_id, |a| {
            if a.parts
                .iter()
                .any(|p| matches!(p, Part::Text { id, .. } if *id == part_id))
            {
                return Err(format!("execution {execution_id} was already recovered"));
            }
            a.finish = Some(Finish::Error);
            a.error = Some(MessageError {
                reason: None,
                kind: "interrupted".into(),
                message: text.into(),
            });
            a.time.completed = Some(now);
            for part in &mut a.parts {
                let Part::Tool(t) = part else { continue };
                let s = &mut t.state;
                if !s.status.is_open() {
                    continue;
                }
                if s.status == ToolStatus::Pending {
                    s.structured = Some(Value::Object(Default::default()));
                    s.content = Some(Vec::new());
                }
                if s.input.is_string() {
                    s.input = Value::Object(Default::default());
                }
                s.status = ToolStatus::Error;
                s.error = Some(if stopped_tools.contains(&t.call_id) {
                    let how = if owner_alive {
                        TOOL_PROCESS_STOPPED_OWNER_ALIVE
                    } else {
                        TOOL_PROCESS_STOPPED
                    };
                    format!("{TOOL_OUTCOME_UNKNOWN}; {how}")
                } else {
                    TOOL_OUTCOME_UNKNOWN.into()
                });
                s.time.get_or_insert_with(ToolTime::default).end = Some(now);
            }
            a.parts.push(Part::Text {
                id: part_id.clone(),
                text: text.into(),
            });
            Ok(())
        })
    }

    fn insert_message(&mut self, id: &str, data: MessageData) -> FoldResult {
        if self.p.messages.contains_key(id) {
            return Err(format!("message {id} already exists"));
        }
        let e = self.e;
        self.p.messages.insert(
            id.to_string(),
            MessageRow {
                id: id.to_string(),
                session_id: e.session_id.clone(),
                seq: e.seq,
                time_created: e.time_created,
                time_updated: e.time_created,
                data,
            },
        );
        self.p.touched.messages.insert(id.to_string());
        Ok(())
    }

    /// Runs `f` on the assistant `id` of this session, refusing anything else.
    fn assistant(
        &mut self,
        id: &str,
        f: impl FnOnce(&mut AssistantData) -> FoldResult,
    ) -> FoldResult {
        let now = self.e.time_created;
        let session_id = &self.e.session_id;
        let message = self
            .p
            .messages
            .get_mut(id)
            .filter(|m| &m.session_id == session_id)
            .ok_or_else(|| format!("assistant {id} is not in session {session_id}"))?;
        let assistant = message
            .data
            .as_assistant_mut()
            .ok_or_else(|| format!("message {id} is not an assistant"))?;
        f(assistant)?;
        message.time_updated = now;
        self.p.touched.messages.insert(id.to_string());
        Ok(())
    }

    fn tool(
        &mut self,
        message_id: &str,
        call_id: &str,
        from: &[ToolStatus],
        f: impl FnOnce(&mut ToolState, i64),
    ) -> FoldResult {
        let now = self.e.time_created;
        self.assistant(message_id, |a| {
            let tool = a
                .tool_mut(call_id)
                .ok_or_else(|| format!("tool call {call_id} does not exist"))?;
            if !from.contains(&tool.state.status) {
                return Err(format!(
                    "tool call {call_id} is {}",
                    tool.state.status.as_str()
                ));
            }
            f(&mut tool.state, now);
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests;
