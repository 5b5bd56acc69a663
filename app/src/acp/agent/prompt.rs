//! `session/prompt`: a turn, from the prompt to the answer that says how it ended.

use super::*;
use steward_engine::message::PromptBlock;

impl Agent {
    /// Runs a turn: the prompt is admitted (with the session's claim, in one
    /// transaction) and the answer says how the turn ended. Its updates stream
    /// through the forwarder, and the answer waits for them.
    pub(super) async fn prompt(
        &self,
        request: PromptRequest,
        turn: TurnGuard,
    ) -> Result<Value, Failure> {
        let session = request.session_id.0.to_string();
        let (text, content) = prompt_text(&request.prompt)?;
        // A prompt sent right behind a load of its session runs after the load.
        tokio::select! {
            loaded = self.views.after_loads(&session) => loaded?,
            () = turn.turn.wait_cancelled() => return to_value(PromptResponse::new(StopReason::Cancelled)),
        }
        let before = self
            .engine
            .last_seq(&session)
            .await
            .map_err(engine_failure)?;
        self.views.expect_prompt(&session, &text);
        let mut events = self.engine.subscribe();
        let input = match self.engine.submit_content(&session, &text, &content).await {
            Ok(input) => input,
            Err(e) => {
                self.views.forget_prompt(&session, &text);
                return Err(engine_failure(e));
            }
        };
        // The prompt may be queued behind an execution already running (a
        // continuation): a cancel stops whatever runs, and the execution that takes
        // up this prompt too, however late it starts.
        let outcome = {
            let idle = self.engine.wait_idle(&session);
            tokio::pin!(idle);
            if turn.turn.cancelled() {
                self.engine.cancel(&session);
            }
            loop {
                tokio::select! {
                    outcome = &mut idle => break outcome,
                    () = turn.turn.wait_cancelled() => {
                        self.engine.cancel(&session);
                    }
                    event = events.recv() => {
                        let promoted = matches!(
                            &event,
                            Ok(EngineEvent::Committed(record)) if record.session_id == session
                                && matches!(&record.event, Event::InputPromoted { input_id, .. } if *input_id == input.id)
                        );
                        if promoted && turn.turn.cancelled() {
                            self.engine.cancel(&session);
                        }
                    }
                }
            }
        };
        // Another process held the session when this one went to run the prompt it
        // had admitted: that process takes it up (pending inputs run before it lets
        // go of the session), and its turn streams here from the file. The answer
        // waits for it, as for a turn run here.
        let outcome = match outcome {
            Some(SessionOutcome::Busy { owner_id }) => {
                tracing::info!(%session, %owner_id, "the admitted prompt runs in another process");
                let mut check = tokio::time::interval(std::time::Duration::from_millis(250));
                loop {
                    tokio::select! {
                        _ = check.tick() => {
                            if self.engine.input_done(&session, &input.id).await.map_err(engine_failure)? {
                                break Some(SessionOutcome::Ran(Outcome::Idle));
                            }
                        }
                        () = turn.turn.wait_cancelled() => {
                            // The process running it is not this one to cancel.
                            break Some(SessionOutcome::Ran(Outcome::Cancelled));
                        }
                    }
                }
            }
            other => other,
        };
        if outcome == Some(SessionOutcome::Stopped) {
            // Steward is shutting down: its recovery closes the turn; the client
            // hears of that before the answer.
            let mut shut_down = self.shut_down.clone();
            let _ = shut_down.wait_for(|done| *done).await;
        }
        self.views.barrier().await;
        // What a cancellation or a failure closed without an event of its own.
        let turn_messages = self
            .engine
            .messages_after(&session, before)
            .await
            .map_err(engine_failure)?;
        self.views.settle(&session, &turn_messages);
        let stop = match outcome {
            // The turn's own end decides (the session's last execution may be a
            // later one, with nothing left to do).
            _ if turn_was_cancelled(&turn_messages) => StopReason::Cancelled,
            Some(SessionOutcome::Ran(Outcome::Idle)) | None => {
                if turn_hit_a_limit(&turn_messages, "length") {
                    StopReason::MaxTokens
                } else {
                    StopReason::EndTurn
                }
            }
            Some(SessionOutcome::Ran(Outcome::Cancelled)) => StopReason::Cancelled,
            Some(SessionOutcome::Ran(Outcome::Failed(_)))
                if turn_hit_a_limit(&turn_messages, "limit") =>
            {
                StopReason::MaxTurnRequests
            }
            Some(SessionOutcome::Ran(Outcome::Failed(message))) => {
                return Err((INTERNAL_ERROR, format!("the turn failed: {message}")));
            }
            Some(SessionOutcome::Busy { owner_id }) => {
                return Err((
                    INTERNAL_ERROR,
                    format!("session {session} is held by another live owner ({owner_id})"),
                ));
            }
            Some(outcome @ SessionOutcome::WaitsForProvider { .. }) => {
                return Err((INTERNAL_ERROR, format!("session {session} {outcome}")));
            }
            Some(SessionOutcome::Stopped) => {
                return Err((
                    INTERNAL_ERROR,
                    "the turn was stopped: Steward is shutting down; the next launch continues it"
                        .into(),
                ));
            }
            Some(SessionOutcome::Ran(Outcome::Lost)) => {
                return Err((
                    INTERNAL_ERROR,
                    format!(
                        "the turn stopped: this process lost its claim on session {session} \
                         (its lease ran out, and recovery took the session over); \
                         `steward inspect` shows what became of it"
                    ),
                ));
            }
            Some(SessionOutcome::Ran(Outcome::Error(message)) | SessionOutcome::Error(message)) => {
                return Err((INTERNAL_ERROR, format!("the turn failed: {message}")));
            }
            Some(SessionOutcome::Quarantined {
                execution_id,
                reason,
            }) => {
                return Err((
                    INTERNAL_ERROR,
                    format!(
                        "session {session} is blocked by quarantined execution {execution_id}: \
                         {reason} (`steward wake {execution_id}` retries it)"
                    ),
                ));
            }
            Some(SessionOutcome::AwaitingRecovery { execution_id }) => {
                return Err((
                    INTERNAL_ERROR,
                    format!("session {session}: execution {execution_id} waits for recovery"),
                ));
            }
        };
        drop(turn);
        to_value(PromptResponse::new(stop))
    }
}

/// Whether the turn ended in a user's cancellation: its last message is a
/// cancellation note, or an assistant interrupted without a recovery's part.
fn turn_was_cancelled(turn: &[steward_engine::projection::MessageRow]) -> bool {
    use steward_engine::message::{MessageData, Part, SyntheticKind};
    let Some(last) = turn
        .iter()
        .rev()
        .find(|m| !matches!(m.data, MessageData::User(_)))
    else {
        return false;
    };
    match &last.data {
        MessageData::Synthetic(s) => s.kind == SyntheticKind::Interrupted,
        MessageData::Assistant(a) => {
            a.error.as_ref().is_some_and(|e| e.kind == "interrupted")
                && !a
                    .parts
                    .iter()
                    .any(|p| matches!(p, Part::Text { id, .. } if id.starts_with("recovery:")))
        }
        MessageData::User(_) => false,
    }
}

/// Whether the turn's last assistant ended because of a limit of `kind`: `length`
/// (the provider's token limit, a finish) or `limit` (`agent.max_steps`, an error).
fn turn_hit_a_limit(turn: &[steward_engine::projection::MessageRow], kind: &str) -> bool {
    let Some(last) = turn.iter().rev().find_map(|m| m.data.as_assistant()) else {
        return false;
    };
    match kind {
        "length" => last.finish.is_some_and(|f| f.as_str() == "length"),
        _ => last.error.as_ref().is_some_and(|e| e.kind == kind),
    }
}

/// The prompt as the engine takes it: its text, and — when it carries resources —
/// its blocks, kept as they are (protocol §4.20): a `resource_link` as a link, an
/// embedded `resource` (`embeddedContext`) as itself. Images and audio are not
/// advertised, and are refused.
pub(super) fn prompt_text(blocks: &[ContentBlock]) -> Result<(String, Vec<PromptBlock>), Failure> {
    use agent_client_protocol_schema::v1::EmbeddedResourceResource;
    let mut kept = Vec::new();
    for block in blocks {
        kept.push(match block {
            ContentBlock::Text(t) => PromptBlock::Text {
                text: t.text.clone(),
            },
            ContentBlock::ResourceLink(link) => PromptBlock::Link {
                uri: link.uri.clone(),
                name: link.name.clone(),
                title: link.title.clone(),
                mime_type: link.mime_type.clone(),
            },
            ContentBlock::Resource(embedded) => match &embedded.resource {
                EmbeddedResourceResource::TextResourceContents(r) => PromptBlock::Resource {
                    uri: r.uri.clone(),
                    mime_type: r.mime_type.clone(),
                    text: Some(r.text.clone()),
                    blob: None,
                    size: None,
                },
                EmbeddedResourceResource::BlobResourceContents(r) => PromptBlock::Resource {
                    uri: r.uri.clone(),
                    mime_type: r.mime_type.clone(),
                    text: None,
                    blob: Some(r.blob.clone()),
                    size: None,
                },
                _ => {
                    return Err((
                        INVALID_PARAMS,
                        "an embedded resource must carry text or a blob".into(),
                    ));
                }
            },
            _ => {
                return Err((
                    INVALID_PARAMS,
                    "only text, resource links and embedded resources are supported in prompts"
                        .into(),
                ));
            }
        });
    }
    let prompt = PromptBlock::text_of(&kept);
    // Refused as the engine would refuse it (whitespace alone), but as the
    // client's mistake.
    if let Err(e) = steward_engine::engine::check_prompt(&prompt) {
        return Err((INVALID_PARAMS, e.to_string()));
    }
    if !PromptBlock::carry_resources(&kept) {
        kept.clear();
    }
    Ok((prompt, kept))
}
