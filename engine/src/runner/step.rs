//! One provider step: `step.started`, the dispatch boundary, the stream with text
//! committed in coalesced chunks, and `step.ended` (or `step.failed`).

use std::time::{Duration, Instant};

use crate::claim::Cleared;
use crate::events::{Event, OfferedTools};
use crate::ids;
use crate::message::{Finish, MessageError, MessageKind, Usage};
use crate::phase::PhaseChange;
use crate::projection::MessageRow;
use crate::provider::{ProviderError, ProviderEvent, ProviderRequest, Purpose, ToolCall, context};
use crate::runner::{Execution, Flow, Stop};

/// Commit streamed text at least this often...
pub(crate) const TEXT_FLUSH_INTERVAL: Duration = Duration::from_millis(100);
/// ...or as soon as this much is buffered — or an eighth of what the step streamed
/// before, when that is more: each commit rewrites the assistant, so chunks that
/// grow with it keep a long answer's writes linear in its length, not quadratic.
pub(crate) const TEXT_FLUSH_BYTES: usize = 4096;

/// How a step ended.
#[derive(Debug)]
pub(crate) enum StepEnd {
    /// The provider asked for tools; their `tool.called` events are committed.
    ToolCalls(Vec<(String, ToolCall)>),
    /// The provider stopped; the claim was cleared unless a wake is pending.
    Stopped(Cleared),
    /// The provider failed for good.
    Failed(String, Cleared),
}

/// The longest wait for a retry a provider may ask for (`retry-after`); a longer
/// one ends the step instead, saying when to try again.
pub(crate) const MAX_RETRY_WAIT: Duration = Duration::from_secs(300);

/// What a stream produced.
enum Streamed {
    Done {
        finish: Finish,
        usage: Option<Usage>,
        calls: Vec<ToolCall>,
        reasoning: Vec<crate::message::Reasoning>,
        warnings: Vec<String>,
        text: Tail,
    },
    Failed {
        error: ProviderError,
        produced: bool,
        text: Tail,
    },
}

/// Streamed text not yet committed: it goes into the step's last commit.
struct Tail {
    part_id: String,
    text: String,
    /// When each buffered delta arrived.
    waiting: Vec<Instant>,
}

impl Tail {
    fn event(&self, message_id: &str) -> Option<Event> {
        (!self.text.is_empty()).then(|| Event::StepText {
            message_id: message_id.to_string(),
            part_id: self.part_id.clone(),
            text: self.text.clone(),
        })
    }
}

/// The hash of the tool specs a step sends (`sha256:` and the digest in hex) and
/// the specs as the JSON it is taken over.
fn tool_list(tools: &[crate::provider::ToolSpec]) -> (String, String) {
    use sha2::Digest;
    let listed = serde_json::to_string(
        &tools
            .iter()
            .map(|t| {
                serde_json::json!({
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                })
            })
            .collect::<Vec<_>>(),
    )
    .unwrap_or_default();
    let digest = sha2::Sha256::digest(listed.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    (format!("sha256:{hex}"), listed)
}

/// How long the files a prompt links to may take to read, all together.
const LINK_READ_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

impl Execution {
    /// Reads the files the prompts of the next request link to (protocol §4.20), as
    /// `read_file` reads from disk, and never asking — the newest prompt's first, at
    /// most [`crate::tools::fs::MAX_LINKED_TOTAL`] bytes of them all together, each
    /// file that would pass that left unread: on a thread of its own, which
    /// is abandoned (detached) when it has not finished within [`LINK_READ_LIMIT`]
    /// — the file system can hang — and each file is then said to be unread.
    async fn read_links(&self, messages: &[MessageRow]) -> context::Linked {
        let uris = context::links(messages);
        if uris.is_empty() {
            return context::Linked::new();
        }
        let ctx = crate::tools::ToolContext {
            directory: self.session.directory.clone().into(),
            config: self.services.config.tools.clone(),
            data_dir: self
                .services
                .db
                .path()
                .and_then(|p| p.parent())
                .map(Into::into),
            approved: None,
            shown: None,
            client: None,
        };
        let (done, read) = tokio::sync::oneshot::channel();
        let wanted = uris.clone();
        let spawned = std::thread::Builder::new()
            .name("steward-prompt-files".into())
            .spawn(move || {
                use crate::tools::fs::{MAX_LINKED_TOTAL, linked_text};
                let mut used = 0u64;
                let linked = wanted
                    .into_iter()
                    .map(|uri| {
                        let room = MAX_LINKED_TOTAL.saturating_sub(used);
                        let text = if room == 0 {
                            Err(format!(
                                "the newer prompts' files fill the {MAX_LINKED_TOTAL} bytes one request may hold"
                            ))
                        } else {
                            linked_text(&ctx, &uri, room)
                        };
                        if let Ok(text) = &text {
                            used += text.len() as u64;
                        }
                        (uri, text)
                    })
                    .collect::<context::Linked>();
                let _ = done.send(linked);
            });
        let unread = |why: String| {
            uris.iter()
                .map(|uri| (uri.clone(), Err(why.clone())))
                .collect::<context::Linked>()
        };
        if let Err(e) = spawned {
            return unread(format!("it could not be read: {e}"));
        }
        match tokio::time::timeout(LINK_READ_LIMIT, read).await {
            Ok(Ok(linked)) => linked,
            Ok(Err(_)) => unread("reading it failed".into()),
            Err(_) => unread(format!(
                "reading it did not finish within {} s",
                LINK_READ_LIMIT.as_secs()
            )),
        }
    }

    /// The files the prompts of the next request link to, read ([`Self::read_links`])
    /// unless the execution is cancelled or loses its claim meanwhile: what the
    /// budget's estimate counts and the step sends.
    pub(crate) async fn linked(&self, messages: &[MessageRow]) -> Flow<context::Linked> {
        tokio::select! {
            _ = self.cancel.cancelled() => Err(Stop::Cancelled),
            _ = self.lost.cancelled() => Err(Stop::Lost),
            linked = self.read_links(messages) => Ok(linked),
        }
    }

    /// A step of the conversation `messages`, with the files its prompts link to as
    /// `linked` has them.
    pub(crate) async fn step(
        &mut self,
        messages: Vec<MessageRow>,
        linked: context::Linked,
    ) -> Flow<StepEnd> {
        let step_index = messages
            .iter()
            .filter(|m| m.data.kind() == MessageKind::Assistant)
            .count();
        // The session's MCP servers are started (or found running) first; what the
        // step offers is recorded with it, so a transcript can be replayed against
        // what the model saw.
        let offer = {
            let (mcp, session) = (self.services.mcp.clone(), self.claim.session_id.clone());
            let directory = std::path::PathBuf::from(&self.session.directory);
            tokio::select! {
                _ = self.cancel.cancelled() => return Err(Stop::Cancelled),
                _ = self.lost.cancelled() => return Err(Stop::Lost),
                offer = mcp.offer(&session, &directory) => offer,
            }
        };
        let mut tools = self.services.tools.specs();
        tools.extend(offer.tools.values().map(|t| t.spec()));
        self.offered = offer.tools;
        let (hash, listed) = tool_list(&tools);
        let offered = OfferedTools {
            hash: hash.clone(),
            unavailable: offer.unavailable,
        };
        for missing in &offered.unavailable {
            tracing::warn!(server = %missing.server, error = %missing.error, "an MCP server's tools are not offered");
        }
        let request = ProviderRequest {
            session_id: self.claim.session_id.clone(),
            purpose: Purpose::Step,
            step_index,
            messages: context::conversation_with(&self.session.directory, &messages, Some(&linked)),
            tools,
        };
        let provider = self.provider.clone();
        let message_id = ids::new(ids::MESSAGE, self.services.clock.now_ms());
        let (execution_id, id) = (self.claim.execution_id.clone(), message_id.clone());
        let (name, model) = (provider.name().to_string(), provider.model().to_string());
        self.commit(move |f| {
            crate::store::tool_lists::keep(f.tx(), &hash, &listed, f.now_ms())?;
            f.append(Event::StepStarted {
                message_id: id.clone(),
                execution_id,
                provider: name,
                model,
                tools: Some(offered),
            })?;
            f.set_assistant(&id)?;
            f.change_phase(PhaseChange::WorkStarted).map(drop)
        })
        .await?;
        self.current_message = Some(message_id.clone());

        let max_attempts = self.services.config.provider.max_attempts.max(1);
        let mut attempt = 0;
        let streamed = loop {
            attempt += 1;
            crate::failpoint!("runner.before_provider_dispatch");
            let change = (attempt == 1).then_some(PhaseChange::Dispatched);
            self.dispatch_boundary(change).await?;
            crate::failpoint!("runner.after_provider_dispatch");
            let stream = provider.stream(request.clone());
            match self.consume(stream, &message_id).await? {
                Streamed::Failed {
                    error,
                    produced: false,
                    ..
                } if self.retries(&error, attempt, max_attempts) => {
                    self.wait_to_retry(&error, attempt, max_attempts).await?;
                }
                Streamed::Failed {
                    mut error,
                    produced: false,
                    text,
                } if error.retryable && error.retry_after.is_some_and(|w| w > MAX_RETRY_WAIT) => {
                    let wait = error.retry_after.unwrap_or_default();
                    error.message = format!(
                        "{} (the provider asks to try again in {} s, longer than Steward waits: try again later)",
                        error.message,
                        wait.as_secs()
                    );
                    break Streamed::Failed {
                        error,
                        produced: false,
                        text,
                    };
                }
                other => break other,
            }
        };
        self.settle(message_id, streamed).await
    }

    /// Whether a provider request that failed before any output is tried again
    /// (protocol §4.18): the error is retryable, attempts are left, and the provider
    /// asks for no longer a wait than [`MAX_RETRY_WAIT`].
    pub(crate) fn retries(&self, error: &ProviderError, attempt: u32, max_attempts: u32) -> bool {
        error.retryable
            && attempt < max_attempts
            && error.retry_after.is_none_or(|wait| wait <= MAX_RETRY_WAIT)
    }

    /// Waits before attempt `attempt + 1` of `max_attempts` — as long as the
    /// provider asked, else 500 ms doubling to 8 s — saying so
    /// ([`crate::runner::EngineEvent::Retrying`]); a cancellation or a lost claim
    /// ends the wait.
    pub(crate) async fn wait_to_retry(
        &self,
        error: &ProviderError,
        attempt: u32,
        max_attempts: u32,
    ) -> Flow<()> {
        let wait = error
            .retry_after
            .unwrap_or_else(|| Duration::from_millis(500 * (1 << (attempt - 1).min(4))));
        tracing::warn!(attempt, error = %error, wait_ms = wait.as_millis() as u64, "provider failed; retrying");
        let at_ms =
            self.services.clock.now_ms() + i64::try_from(wait.as_millis()).unwrap_or(i64::MAX);
        let _ = self
            .services
            .events
            .send(crate::runner::EngineEvent::Retrying {
                session_id: self.claim.session_id.clone(),
                attempt: attempt + 1,
                of: max_attempts,
                at_ms,
                error: error.message.clone(),
            });
        self.pause(wait).await
    }

    /// Commits the end of the step: remaining text, `step.ended` (phase back to
    /// `ready`) and the tool calls — or `step.failed` — and clears the claim in the
    /// same commit when nothing is left.
    async fn settle(&mut self, message_id: String, streamed: Streamed) -> Flow<StepEnd> {
        let now = self.services.clock.now_ms();
        match streamed {
            Streamed::Done {
                finish,
                usage,
                calls,
                reasoning,
                mut warnings,
                text,
            } => {
                if let Some(warning) = self.compaction_warning.take() {
                    warnings.insert(0, warning);
                }
                let reasoning: Vec<(String, crate::message::Reasoning)> = reasoning
                    .into_iter()
                    .map(|r| (ids::new(ids::PART, now), r))
                    .collect();
                let calls: Vec<(String, ToolCall)> = unique_call_ids(calls)
                    .into_iter()
                    .map(|c| (ids::new(ids::PART, now), c))
                    .collect();
                let to_call = calls.clone();
                let no_calls = calls.is_empty();
                let tail = text.event(&message_id);
                let cleared = self
                    .commit(move |f| {
                        if let Some(tail) = tail {
                            f.append(tail)?;
                        }
                        for (part_id, r) in reasoning {
                            f.append(Event::StepReasoning {
                                message_id: message_id.clone(),
                                part_id,
                                text: r.text,
                                signature: r.signature,
                                redacted: r.redacted,
                            })?;
                        }
                        f.append(Event::StepEnded {
                            message_id: message_id.clone(),
                            finish,
                            usage,
                            warnings,
                        })?;
                        f.change_phase(PhaseChange::StepSettled)?;
                        for (part_id, call) in to_call {
                            f.append(Event::ToolCalled {
                                message_id: message_id.clone(),
                                part_id,
                                call_id: call.call_id,
                                tool: call.tool,
                                input: call.input,
                            })?;
                        }
                        if no_calls {
                            crate::failpoint!("runner.before_clear");
                            return f.clear().map(Some);
                        }
                        Ok(None)
                    })
                    .await?;
                self.note_deltas(text.waiting);
                Ok(match cleared {
                    Some(cleared) => StepEnd::Stopped(cleared),
                    None => {
                        crate::failpoint!("runner.after_tool_called");
                        StepEnd::ToolCalls(calls)
                    }
                })
            }
            Streamed::Failed {
                mut error, text, ..
            } => {
                if let Some(warning) = self.compaction_warning.take() {
                    error.message = format!("{} (before this step, {warning})", error.message);
                }
                let message = error.message.clone();
                let tail = text.event(&message_id);
                let cleared = self
                    .commit(move |f| {
                        if let Some(tail) = tail {
                            f.append(tail)?;
                        }
                        f.append(Event::StepFailed {
                            message_id,
                            error: MessageError {
                                kind: "provider".into(),
                                message: error.message,
                                reason: Some(error.kind.as_str().into()),
                            },
                        })?;
                        f.change_phase(PhaseChange::StepSettled)?;
                        f.clear()
                    })
                    .await?;
                self.note_deltas(text.waiting);
                Ok(StepEnd::Failed(message, cleared))
            }
        }
    }

    /// Reads the stream, committing text at most every [`TEXT_FLUSH_INTERVAL`] or
    /// [`TEXT_FLUSH_BYTES`]; what is left at the end goes into the step's last commit.
    async fn consume(
        &mut self,
        mut stream: crate::provider::ProviderStream,
        message_id: &str,
    ) -> Flow<Streamed> {
        let part_id = ids::new(ids::PART, self.services.clock.now_ms());
        let mut buffer = String::new();
        let mut streamed = 0usize;
        let mut waiting: Vec<Instant> = Vec::new();
        let mut calls = Vec::new();
        let mut reasoning = Vec::new();
        let mut warnings = Vec::new();
        let (mut finish, mut usage, mut produced) = (None, None, false);
        loop {
            let deadline = waiting.first().map(|t| *t + TEXT_FLUSH_INTERVAL);
            let flush_due = async {
                match deadline {
                    Some(at) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                _ = self.lost.cancelled() => return Err(Stop::Lost),
                _ = self.cancel.cancelled() => {
                    self.pending_text = (!buffer.is_empty())
                        .then(|| (message_id.to_string(), part_id.clone(), buffer));
                    return Err(Stop::Cancelled);
                }
                _ = flush_due => {
                    streamed += buffer.len();
                    self.flush_text(message_id, &part_id, &mut buffer, &mut waiting).await?;
                }
                item = stream.next() => match item {
                    None => break,
                    Some(Ok(ProviderEvent::TextDelta(text))) => {
                        produced = true;
                        buffer.push_str(&text);
                        waiting.push(Instant::now());
                        if buffer.len() >= TEXT_FLUSH_BYTES.max(streamed / 8) {
                            streamed += buffer.len();
                            self.flush_text(message_id, &part_id, &mut buffer, &mut waiting).await?;
                        }
                    }
                    Some(Ok(ProviderEvent::ToolCall(call))) => {
                        produced = true;
                        calls.push(call);
                    }
                    Some(Ok(ProviderEvent::Reasoning(r))) => {
                        produced = true;
                        reasoning.push(r);
                    }
                    Some(Ok(ProviderEvent::Warning(w))) => warnings.push(w),
                    Some(Ok(ProviderEvent::Usage(u))) => usage = Some(u),
                    Some(Ok(ProviderEvent::Finish(f))) => finish = Some(f),
                    Some(Err(error)) => {
                        let text = Tail { part_id, text: buffer, waiting };
                        return Ok(Streamed::Failed { error, produced, text });
                    }
                },
            }
        }
        let text = Tail {
            part_id,
            text: buffer,
            waiting,
        };
        Ok(match finish {
            Some(finish) => Streamed::Done {
                finish,
                usage,
                calls,
                reasoning,
                warnings,
                text,
            },
            None => Streamed::Failed {
                error: ProviderError::fatal(
                    "the provider stream ended before the answer was complete",
                ),
                produced,
                text,
            },
        })
    }

    async fn flush_text(
        &mut self,
        message_id: &str,
        part_id: &str,
        buffer: &mut String,
        waiting: &mut Vec<Instant>,
    ) -> Flow<()> {
        if buffer.is_empty() {
            return Ok(());
        }
        let text = std::mem::take(buffer);
        let (message_id, part_id) = (message_id.to_string(), part_id.to_string());
        self.commit(move |f| {
            f.append(Event::StepText {
                message_id,
                part_id,
                text,
            })
            .map(drop)
        })
        .await?;
        self.note_deltas(std::mem::take(waiting));
        crate::failpoint!("runner.after_text_commit");
        Ok(())
    }

    /// Records a commit of buffered deltas that has just finished: how many, and how
    /// long the oldest of them waited to be durable.
    fn note_deltas(&self, waiting: Vec<Instant>) {
        let Some(first) = waiting.first() else {
            return;
        };
        let mut stats = self
            .services
            .stats
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        stats.deltas += waiting.len() as u64;
        stats.text_commits += 1;
        stats.max_delta_wait = stats.max_delta_wait.max(first.elapsed());
    }
}

/// A provider may repeat a call id (or send none); each call of a step needs its own.
fn unique_call_ids(calls: Vec<ToolCall>) -> Vec<ToolCall> {
    let mut seen = std::collections::BTreeSet::new();
    calls
        .into_iter()
        .enumerate()
        .map(|(i, mut call)| {
            if call.call_id.is_empty() {
                call.call_id = format!("call_{i}");
            }
            let base = call.call_id.clone();
            let mut n = 1;
            while !seen.insert(call.call_id.clone()) {
                n += 1;
                call.call_id = format!("{base}_{n}");
            }
            call
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn repeated_or_missing_call_ids_are_made_unique() {
        let call = |id: &str| ToolCall {
            call_id: id.into(),
            tool: "t".into(),
            input: serde_json::json!({}),
        };
        let ids: Vec<String> = unique_call_ids(vec![call("a"), call("a"), call(""), call("a_2")])
            .into_iter()
            .map(|c| c.call_id)
            .collect();
        assert_eq!(ids, vec!["a", "a_2", "call_2", "a_2_2"]);
    }
}
