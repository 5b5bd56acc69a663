//! The execution loop: one busy period of one session under one claim.
//!
//! promote → `step.started` → dispatch boundary (phase `unknown`) → provider stream →
//! text committed in coalesced chunks → `step.ended` (phase `ready`, same commit) →
//! tool calls: `tool.called`, `tool.started` (the dispatch boundary, with the process
//! identity), run, `tool.completed`/`tool.failed` → next step, until the provider
//! stops; then the claim is cleared in the same commit as the last event, unless an
//! input waits for a wake.
//!
//! Every durable write is fenced ([`Fenced`]); a write that loses the fence, or a
//! heartbeat that finds zero rows, stops the execution at once with no further
//! dispatch and no further write. A user cancellation stops the provider stream and
//! the tool's process group first, then commits `step.interrupted` and deletes the
//! claim in one transaction (protocol §4.8).

mod compaction;
mod step;
mod tool_calls;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::claim::{Claim, Cleared, Fenced, SelfFence};
use crate::clock::SharedClock;
use crate::config::Config;
use crate::db::Db;
use crate::error::{Error, Result};
use crate::events::{Event, EventRecord};
use crate::ids;
use crate::message::{MessageData, PromptBlock};
use crate::phase::PhaseChange;
use crate::projection::{MessageRow, SessionRow};
use crate::provider::Provider;
use crate::store::rows;
use crate::store::sessions::{self, Scope};
use crate::tools::{Permission, ToolRegistry};

/// What an execution needs besides its claim; shared by all executions of an engine.
#[derive(Debug, Clone)]
pub struct Services {
    pub db: Db,
    pub clock: SharedClock,
    pub config: Arc<Config>,
    pub provider: Arc<dyn Provider>,
    pub tools: ToolRegistry,
    /// The MCP servers of this process, by session.
    pub mcp: crate::mcp::McpHub,
    pub permission: Arc<dyn Permission>,
    /// "Always allow" answers ([`crate::tools::AlwaysAllowed`]).
    pub always: Arc<crate::tools::AlwaysAllowed>,
    /// The editor buffers of sessions whose client offers them (ACP `fs`).
    pub client_files:
        Arc<Mutex<std::collections::HashMap<String, Arc<dyn crate::tools::ClientFiles>>>>,
    pub events: broadcast::Sender<EngineEvent>,
    pub stats: Arc<Mutex<RunnerStats>>,
}

/// What the engine tells its listeners (the CLI, the TUI, ACP). Kinds are added
/// over time: match with a wildcard arm.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum EngineEvent {
    /// An event was committed.
    Committed(EventRecord),
    /// An execution ended.
    Finished {
        session_id: String,
        execution_id: String,
        outcome: Outcome,
    },
    /// The session started running here (its first execution is about to acquire).
    Running { session_id: String },
    /// A command's output as it comes (live only: the completed call keeps what
    /// is kept).
    ToolOutput {
        session_id: String,
        call_id: String,
        text: String,
    },
    /// A provider step failed before any output and is tried again at `at_ms`
    /// (attempt `attempt` of `of`), after `error` (protocol §4.18).
    Retrying {
        session_id: String,
        attempt: u32,
        of: u32,
        at_ms: i64,
        error: String,
    },
    /// Nothing runs for the session here any more (no re-run is due), and how its
    /// last run ended — a store failure, a busy session or a quarantined claim
    /// included, which no [`EngineEvent::Finished`] reports because no execution
    /// started.
    Idle {
        session_id: String,
        outcome: crate::coordinator::SessionOutcome,
    },
}

/// How an execution ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing left to do; the claim is cleared.
    Idle,
    /// A step failed for good (the claim is cleared).
    Failed(String),
    /// The user cancelled; `step.interrupted` is committed and the claim is gone.
    Cancelled,
    /// Ownership was lost (fence or heartbeat): nothing more was written.
    Lost,
    /// The store failed; the claim stays for recovery.
    Error(String),
}

/// Counters for the runner benchmark.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunnerStats {
    pub deltas: u64,
    pub text_commits: u64,
    /// The longest any streamed delta waited before its commit finished.
    pub max_delta_wait: Duration,
}

/// Why the loop stopped early.
#[derive(Debug)]
pub(crate) enum Stop {
    Cancelled,
    Lost,
    Failed(Error),
}

impl From<Error> for Stop {
    fn from(error: Error) -> Self {
        match error {
            Error::FenceLost { .. } => Stop::Lost,
            other => Stop::Failed(other),
        }
    }
}

type Flow<T> = std::result::Result<T, Stop>;

/// The provider that runs `session_id`'s next step (protocol §4.17): its own
/// provider and model — this process's provider, answering with the session's
/// model — or none, when this process does not have them. A session that never
/// ran a step takes this process's.
pub fn provider_for(
    default: &Arc<dyn Provider>,
    session_id: &str,
    model: Option<(String, String)>,
) -> Result<Arc<dyn Provider>> {
    let unavailable = |p: &str, m: &str| Error::ProviderUnavailable {
        session_id: session_id.to_string(),
        wanted: format!("{p}/{m}"),
        here: format!("{}/{}", default.name(), default.model()),
    };
    match model {
        None => Ok(default.clone()),
        Some((p, m)) if p == default.name() && m == default.model() => Ok(default.clone()),
        Some((p, m)) if p == default.name() => {
            default.with_model(&m).ok_or_else(|| unavailable(&p, &m))
        }
        Some((p, m)) => Err(unavailable(&p, &m)),
    }
}

/// One execution.
#[derive(Debug)]
pub struct Execution {
    services: Services,
    /// The provider of this session's steps ([`provider_for`]).
    provider: Arc<dyn Provider>,
    claim: Claim,
    session: SessionRow,
    fence: Arc<SelfFence>,
    /// The user's cancellation.
    cancel: CancellationToken,
    /// Ownership lost (cancelled by the heartbeat).
    lost: CancellationToken,
    /// The assistant the execution is working on, for cancellation.
    current_message: Option<String>,
    /// Streamed text not yet committed, committed with a cancellation.
    pending_text: Option<(String, String, String)>,
    /// The MCP tools the current step offered, by offered name.
    offered: std::collections::BTreeMap<String, Arc<dyn crate::tools::Tool>>,
    /// A compaction failed in this turn: it is not tried again before the next.
    compaction_failed: bool,
    /// Why the last compaction failed, told with the next step that ends.
    compaction_warning: Option<String>,
}

impl Execution {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        services: Services,
        provider: Arc<dyn Provider>,
        claim: Claim,
        session: SessionRow,
        fence: Arc<SelfFence>,
        cancel: CancellationToken,
        lost: CancellationToken,
    ) -> Execution {
        Execution {
            services,
            provider,
            claim,
            session,
            fence,
            cancel,
            lost,
            current_message: None,
            pending_text: None,
            offered: Default::default(),
            compaction_failed: false,
            compaction_warning: None,
        }
    }

    /// Runs until the session is idle, the user cancels, or ownership is lost.
    pub async fn run(mut self, scope: Scope) -> Outcome {
        let continuations = match &scope {
            Scope::Continuations(ids) => ids.clone(),
            Scope::Queued => Vec::new(),
        };
        let outcome = match self.drive(scope).await {
            Ok(outcome) => outcome,
            Err(Stop::Cancelled) => self.commit_cancel().await,
            Err(Stop::Lost) => Outcome::Lost,
            Err(Stop::Failed(e)) => self.failed(e, continuations).await,
        };
        let _ = self.services.events.send(EngineEvent::Finished {
            session_id: self.claim.session_id.clone(),
            execution_id: self.claim.execution_id.clone(),
            outcome: outcome.clone(),
        });
        outcome
    }

    async fn drive(&mut self, first: Scope) -> Flow<Outcome> {
        let mut scope = first;
        let mut failure: Option<String> = None;
        loop {
            // A new turn: a compaction that failed in the last one may be tried again.
            self.compaction_failed = false;
            // At rest (nothing promoted yet), a compaction reaches `safe`: a crash right
            // after it loses nothing, since pending inputs keep their wakes.
            let messages = self.messages().await?;
            if self.over_budget(&messages, &self.linked(&messages).await?) {
                self.compact(true, &messages).await?;
            }
            let promoted = self.promote(&scope).await?;
            scope = Scope::Queued;
            if promoted == 0 {
                match self.commit(|f| f.clear()).await? {
                    Cleared::Done => return Ok(finished(failure)),
                    Cleared::WakePending => continue,
                }
            }
            match self.turn().await? {
                (Cleared::Done, f) => return Ok(finished(f.or(failure))),
                (Cleared::WakePending, f) => failure = f.or(failure),
            }
        }
    }

    /// Steps until the provider stops. Returns whether the claim was cleared, and
    /// the failure if the last step failed.
    async fn turn(&mut self) -> Flow<(Cleared, Option<String>)> {
        let max_steps = self.services.config.agent.max_steps;
        for _ in 0..max_steps {
            // One read of the transcript per step: for the budget and the request.
            // The prompts' linked files too: read once, counted and sent.
            let mut messages = self.messages().await?;
            let mut linked = self.linked(&messages).await?;
            if self.over_budget(&messages, &linked) {
                self.compact(false, &messages).await?;
                messages = self.messages().await?;
                linked = self.linked(&messages).await?;
            }
            match self.step(messages, linked).await? {
                step::StepEnd::ToolCalls(calls) => self.run_tools(calls).await?,
                step::StepEnd::Stopped(cleared) => return Ok((cleared, None)),
                step::StepEnd::Failed(message, cleared) => return Ok((cleared, Some(message))),
            }
        }
        let cleared = self.stop_at_step_limit(max_steps).await?;
        Ok((cleared, Some(format!("stopped after {max_steps} steps"))))
    }

    /// Runs `f` in one fenced write transaction and publishes the events it appended.
    async fn commit<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Fenced<'_, '_>) -> Result<R> + Send + 'static,
    ) -> Flow<R> {
        if self.lost.is_cancelled() {
            return Err(Stop::Lost);
        }
        let claim = self.claim.clone();
        let clock = self.services.clock.clone();
        let (out, records) = self
            .services
            .db
            .write(move |tx| {
                // Read inside the job: the writer may have been busy, and the fence
                // must be checked against the time of the write.
                let mut fenced = Fenced::check(tx, &claim, clock.now_ms())?;
                let out = f(&mut fenced)?;
                Ok((out, fenced.take_appended()))
            })
            .await?;
        for record in records {
            let _ = self.services.events.send(EngineEvent::Committed(record));
        }
        Ok(out)
    }

    /// The dispatch boundary (protocol §4.5): the self-fence, then a fenced check in its
    /// own transaction; the caller sends right after, with no other await between.
    async fn dispatch_boundary(&self, change: Option<PhaseChange>) -> Flow<()> {
        self.may_dispatch()?;
        self.commit(move |f| match change {
            Some(change) => f.change_phase(change).map(drop),
            None => Ok(()),
        })
        .await?;
        // The commit may have waited for the writer: look again before sending.
        self.may_dispatch()
    }

    /// Neither cancelled nor lost, and within the owner's own deadline (protocol §4.4a).
    fn may_dispatch(&self) -> Flow<()> {
        self.check_stop()?;
        if !self.fence.holds() {
            tracing::warn!(execution = %self.claim.execution_id, "self-fence expired: no dispatch");
            self.lost.cancel();
            return Err(Stop::Lost);
        }
        Ok(())
    }

    async fn promote(&mut self, scope: &Scope) -> Flow<usize> {
        let session_id = self.claim.session_id.clone();
        let scope_owned = scope.clone();
        let auto_continue = self.services.config.recovery.auto_continue;
        let promoted = self
            .commit(move |f| {
                let inputs =
                    sessions::promotable(f.tx(), &session_id, &scope_owned, auto_continue)?;
                for input in &inputs {
                    f.append(Event::InputPromoted {
                        input_id: input.id.clone(),
                        message_id: ids::new(ids::MESSAGE, f.now_ms()),
                    })?;
                    sessions::finish_recovery_wake(f.tx(), &input.id)?;
                }
                if !inputs.is_empty() {
                    f.change_phase(PhaseChange::WorkStarted)?;
                    // The previous turn's assistant is finished: recovery must not
                    // touch it if this execution dies before its next step starts.
                    f.unset_assistant()?;
                }
                Ok(inputs.len())
            })
            .await?;
        if promoted > 0 {
            self.current_message = None;
            crate::failpoint!("runner.after_promote");
            if matches!(scope, Scope::Continuations(_)) {
                crate::failpoint!("wake.after_promote");
            }
        }
        Ok(promoted)
    }

    /// The session's messages, in transcript order.
    /// The session's transcript, for the budget and the requests: its embedded
    /// resources as a prompt keeps them ([`PromptBlock::kept`]) — the values this
    /// process hides redacted even from one admitted where they were not hidden.
    async fn messages(&self) -> Flow<Vec<MessageRow>> {
        let session_id = self.claim.session_id.clone();
        let mut messages = self
            .services
            .db
            .read(move |conn| rows::messages(conn, &session_id))
            .await?;
        for message in &mut messages {
            if let MessageData::User(u) = &mut message.data
                && !u.content.is_empty()
            {
                u.content = PromptBlock::kept(&u.content, &self.services.config.tools.hidden_env);
            }
        }
        Ok(messages)
    }

    /// An execution that cannot go on (protocol §4.14). When the store failed (a full
    /// disk), its claim stays for recovery, and the wake attempts its acquisition
    /// counted are taken back: the store's failure is not the wake's. When a row
    /// failed — one it cannot decode, or that breaks what the engine relies on —
    /// trying again would only fail again: its claim is quarantined with the reason,
    /// so the session waits for the user instead of being woken for ever.
    async fn failed(&mut self, error: Error, continuations: Vec<String>) -> Outcome {
        let execution = self.claim.execution_id.clone();
        if error.is_store_failure() {
            tracing::error!(%execution, %error, "execution stopped: the store failed");
            if !continuations.is_empty() {
                let uncounted = self
                    .services
                    .db
                    .write(move |tx| crate::recovery::wakes::uncount_attempts(tx, &continuations))
                    .await;
                if let Err(e) = uncounted {
                    tracing::warn!(%execution, error = %e, "could not take back a wake attempt");
                }
            }
            return Outcome::Error(error.to_string());
        }
        let reason = error
            .to_string()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        tracing::error!(%execution, %reason, "execution stopped on a row it cannot handle: quarantining its claim");
        let why = reason.clone();
        match self
            .commit(move |f| {
                let now = f.now_ms();
                crate::claim::quarantine(f.tx(), f.claim(), &why, now)
            })
            .await
        {
            Ok(()) => Outcome::Error(format!(
                "{reason}; the session's claim {execution} is quarantined (`steward discard {execution}` unblocks it once the row is mended)"
            )),
            Err(_) => Outcome::Error(reason),
        }
    }

    async fn commit_cancel(&mut self) -> Outcome {
        crate::failpoint!("cancel.before_commit");
        let message = self.current_message.clone();
        let pending = self.pending_text.take();
        let result = self
            .commit(move |f| {
                if let Some((message_id, part_id, text)) = pending {
                    f.append(Event::StepText {
                        message_id,
                        part_id,
                        text,
                    })?;
                }
                f.cancel(message.as_deref()).map(drop)
            })
            .await;
        match result {
            Ok(()) => Outcome::Cancelled,
            Err(Stop::Lost | Stop::Cancelled) => Outcome::Lost,
            Err(Stop::Failed(e)) => Outcome::Error(e.to_string()),
        }
    }

    /// Waits out `delay` unless the execution is cancelled or loses its claim.
    async fn pause(&self, delay: Duration) -> Flow<()> {
        tokio::select! {
            _ = self.cancel.cancelled() => Err(Stop::Cancelled),
            _ = self.lost.cancelled() => Err(Stop::Lost),
            _ = tokio::time::sleep(delay) => Ok(()),
        }
    }

    fn check_stop(&self) -> Flow<()> {
        if self.lost.is_cancelled() {
            Err(Stop::Lost)
        } else if self.cancel.is_cancelled() {
            Err(Stop::Cancelled)
        } else {
            Ok(())
        }
    }
}

fn finished(failure: Option<String>) -> Outcome {
    match failure {
        Some(message) => Outcome::Failed(message),
        None => Outcome::Idle,
    }
}

#[cfg(test)]
mod tests;
