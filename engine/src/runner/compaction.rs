//! Compaction: when the transcript exceeds the token budget, the provider is asked
//! for a summary that stands for everything before it.
//!
//! `compaction.started` forgets the claim's assistant (recovery then neither errors a
//! finished assistant nor mistakes the execution for a superseded one); the request
//! passes the dispatch boundary (phase `unknown`), and is retried as a step's is
//! (protocol §4.18) before any output; `compaction.ended` commits the
//! summary and moves the phase — to `safe` only when the compaction happened at rest,
//! before anything was promoted, so that a crash right after it loses nothing
//! (invariant 13).

use crate::claim::Cleared;
use crate::events::Event;
use crate::ids;
use crate::message::{Finish, MessageData, MessageError, SyntheticKind};
use crate::phase::PhaseChange;
use crate::projection::MessageRow;
use crate::provider::{
    ChatMessage, ProviderError, ProviderEvent, ProviderRequest, Purpose, context,
};
use crate::runner::{Execution, Flow, Stop};

impl Execution {
    /// Whether the next request would exceed the compaction budget — and there is
    /// something new to fold in since the last summary, so that a summary that is
    /// itself over budget does not compact again before every step, and no
    /// compaction failed in this turn (one failure is not repeated before every
    /// step of it). The estimate takes the request as it would be sent: embedded
    /// resources and the linked files as `linked` has them (protocol §4.20).
    pub(crate) fn over_budget(&self, messages: &[MessageRow], linked: &context::Linked) -> bool {
        if self.compaction_failed {
            return false;
        }
        let since_summary = messages
            .iter()
            .rev()
            .take_while(|m| {
                !matches!(&m.data, MessageData::Synthetic(s) if s.kind == SyntheticKind::Compaction)
            })
            .count();
        if since_summary < 2 {
            return false;
        }
        let conversation =
            context::conversation_with(&self.session.directory, messages, Some(linked));
        context::estimate_tokens(&conversation) > self.services.config.compaction.token_budget
    }

    pub(crate) async fn compact(&mut self, at_rest: bool, messages: &[MessageRow]) -> Flow<()> {
        let mut conversation = context::conversation(&self.session.directory, messages);
        conversation.push(ChatMessage::User(context::COMPACTION_INSTRUCTION.into()));
        let message_id = ids::new(ids::MESSAGE, self.services.clock.now_ms());
        let (execution_id, id) = (self.claim.execution_id.clone(), message_id.clone());
        let started_seq = self
            .commit(move |f| {
                let record = f.append(Event::CompactionStarted {
                    execution_id,
                    message_id: id,
                })?;
                f.unset_assistant()?;
                Ok(record.seq)
            })
            .await?;
        self.current_message = None;
        let request = ProviderRequest {
            session_id: self.claim.session_id.clone(),
            purpose: Purpose::Compaction,
            step_index: 0,
            messages: conversation,
            tools: Vec::new(),
        };
        // Retried as a step's request is (protocol §4.18): before any output, within
        // `max_attempts`, after the wait the provider asked for.
        let max_attempts = self.services.config.provider.max_attempts.max(1);
        let mut attempt = 0;
        let (summary, mut failure) = loop {
            attempt += 1;
            let change = (attempt == 1).then_some(PhaseChange::Dispatched);
            self.dispatch_boundary(change).await?;
            let (summary, failed) = self.summarise(request.clone()).await?;
            match failed {
                Some((error, false)) if self.retries(&error, attempt, max_attempts) => {
                    self.wait_to_retry(&error, attempt, max_attempts).await?;
                }
                Some((error, _)) => break (summary, Some(error.message)),
                None => break (summary, None),
            }
        };
        if summary.trim().is_empty() && failure.is_none() {
            failure = Some("the provider returned an empty summary".into());
        }
        if let Some(reason) = failure {
            // No summary, even after the retries: settle the phase and carry on
            // uncompacted, without trying again in this turn; the next step that
            // ends says so.
            tracing::warn!(reason, "compaction failed");
            self.compaction_failed = true;
            self.compaction_warning = Some(format!(
                "the conversation could not be compacted ({reason}): it was sent whole"
            ));
            return self
                .commit(|f| f.change_phase(PhaseChange::StepSettled).map(drop))
                .await;
        }
        crate::failpoint!("compaction.before_ended");
        self.commit(move |f| {
            f.append(Event::CompactionEnded {
                message_id,
                summary,
                through_seq: started_seq,
            })?;
            f.change_phase(PhaseChange::CompactionEnded { at_rest })
                .map(drop)
        })
        .await
    }

    /// Reads one compaction answer: the summary, and the error that ended it with
    /// whether anything came before it.
    async fn summarise(
        &self,
        request: ProviderRequest,
    ) -> Flow<(String, Option<(ProviderError, bool)>)> {
        let mut stream = self.provider.stream(request);
        let mut summary = String::new();
        let mut produced = false;
        loop {
            let item = tokio::select! {
                _ = self.lost.cancelled() => return Err(Stop::Lost),
                _ = self.cancel.cancelled() => return Err(Stop::Cancelled),
                item = stream.next() => item,
            };
            match item {
                None | Some(Ok(ProviderEvent::Finish(Finish::Stop))) => {
                    return Ok((summary, None));
                }
                Some(Ok(ProviderEvent::TextDelta(text))) => {
                    produced = true;
                    summary.push_str(&text);
                }
                Some(Ok(ProviderEvent::ToolCall(_) | ProviderEvent::Reasoning(_))) => {
                    produced = true;
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Ok((summary, Some((e, produced)))),
            }
        }
    }

    /// The turn took `max_steps` steps: a final assistant says so, and the claim is
    /// cleared in the same commit unless a wake is pending.
    pub(crate) async fn stop_at_step_limit(&mut self, max_steps: usize) -> Flow<Cleared> {
        let provider = self.provider.clone();
        let message_id = ids::new(ids::MESSAGE, self.services.clock.now_ms());
        let execution_id = self.claim.execution_id.clone();
        self.current_message = Some(message_id.clone());
        self.commit(move |f| {
            f.append(Event::StepStarted {
                tools: None,
                message_id: message_id.clone(),
                execution_id,
                provider: provider.name().to_string(),
                model: provider.model().to_string(),
            })?;
            f.set_assistant(&message_id)?;
            f.append(Event::StepFailed {
                message_id,
                error: MessageError {
                    reason: None,
                    kind: "limit".into(),
                    message: format!("The agent stopped after {max_steps} steps in one turn."),
                },
            })?;
            f.change_phase(PhaseChange::WorkStarted)?;
            f.clear()
        })
        .await
    }
}
