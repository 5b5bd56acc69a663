//! `steward run [--session ID] [--title T] [--dir PATH] [--json] [--yes] PROMPT...`:
//! admit the prompt, run until the session is idle, stream the assistant's text to
//! stdout (`--json`: one JSON event per line). Ctrl-C cancels the execution, records
//! the cancellation, and exits 130.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context as _, Result, bail};
use serde_json::json;
use steward_engine::Engine;
use steward_engine::coordinator::SessionOutcome;
use steward_engine::engine::Redriving;
use steward_engine::events::{Event, EventRecord};
use steward_engine::runner::{EngineEvent, Outcome};
use steward_engine::store::sessions::title_from;
use steward_engine::store::{Store, rows};
use steward_engine::tools::Headless;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use crate::context::{Context, runtime};
use crate::exit;

use crate::output::{out, say};

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Continue this session instead of starting a new one.
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// The new session's title (default: the start of the prompt).
    #[arg(long, value_name = "T")]
    pub title: Option<String>,
    /// The new session's directory (default: the current directory).
    #[arg(long, value_name = "PATH")]
    pub dir: Option<PathBuf>,
    /// Print one JSON event per line instead of the text.
    #[arg(long)]
    pub json: bool,
    /// Allow every tool, not only those in `tools.allow`.
    #[arg(long)]
    pub yes: bool,
    /// What to ask.
    #[arg(required = true, value_name = "PROMPT")]
    pub prompt: Vec<String>,
}

pub fn run(ctx: &Context, store: Store, args: RunArgs) -> Result<ExitCode> {
    // A prompt of whitespace alone is refused before anything runs: no recovery,
    // no model chosen, nothing admitted.
    steward_engine::engine::check_prompt(&args.prompt.join(" "))?;
    runtime()?.block_on(async move {
        // Ctrl-C is ours from the start: before the prompt is admitted it stops the
        // command with nothing admitted; after, it cancels the turn; a second one
        // leaves at once (whatever still runs is reconciled at the next launch).
        let interrupt = interrupt_handler()?;
        let permission = Arc::new(Headless {
            allow_all: args.yes,
        });
        let chosen = ctx.model_chosen;
        ctx.with_engine(store, permission, async |engine| {
            drive(engine, &args, &interrupt, chosen).await
        })
        .await
    })
}

/// Cancelled by the first SIGINT; the second exits the process with 130 at once.
fn interrupt_handler() -> Result<CancellationToken> {
    let mut signals = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let interrupted = CancellationToken::new();
    let first = interrupted.clone();
    tokio::spawn(async move {
        signals.recv().await;
        first.cancel();
        signals.recv().await;
        say!(
            "\nsteward: interrupted again: leaving now (the turn is reconciled at the next launch)"
        );
        std::process::exit(i32::from(exit::INTERRUPTED));
    });
    Ok(interrupted)
}

async fn drive(
    engine: &Engine,
    args: &RunArgs,
    interrupt: &CancellationToken,
    model_chosen: bool,
) -> Result<ExitCode> {
    // Recovery runs before any session does: the target session's interrupted
    // execution is reconciled and (with `auto_continue`) its continuation promoted
    // ahead of the prompt. Other sessions' wakes are left for `steward`, `acp` or
    // `recover`: this command runs only its own session.
    let report = engine.recover().await?;
    // Other owners' claims that expire while this runs are reconciled on a timer;
    // their wakes are left for an entry point that runs them.
    engine.start_background(Redriving::Nothing);
    if !report.recovered.is_empty() && !args.json {
        say!(
            "steward: reconciled {} interrupted execution{} (see `steward inspect`)",
            report.recovered.len(),
            if report.recovered.len() == 1 { "" } else { "s" }
        );
    }
    let prompt = args.prompt.join(" ");
    // Subscribed before the prompt is admitted: no event of the turn is missed.
    let mut events = engine.subscribe();
    if interrupt.is_cancelled() {
        say!("steward: cancelled before the prompt was admitted");
        return Ok(ExitCode::from(exit::INTERRUPTED));
    }
    // Admitted and claimed in one transaction (a new session created in it too):
    // exit 4 means nothing was admitted, and a refused first prompt leaves no
    // session behind.
    let admitted = match &args.session {
        Some(id) => {
            let id2 = id.clone();
            if engine
                .db()
                .read(move |c| rows::session(c, &id2))
                .await?
                .is_none()
            {
                bail!("session {id} not found");
            }
            // `--provider`/`--model` with `--session`: the user chooses them for the
            // session from here (recorded in its transcript).
            if model_chosen && engine.choose_model(id).await? && !args.json {
                say!("steward: session {id} runs on {} from here", engine.model());
            }
            engine.submit(id, &prompt).await.map(|_| id.clone())
        }
        None => {
            let dir = match &args.dir {
                Some(dir) => dir.clone(),
                None => std::env::current_dir()?,
            };
            let dir = dir
                .canonicalize()
                .with_context(|| format!("session directory {}", dir.display()))?;
            if !dir.is_dir() {
                bail!("session directory {} is not a directory", dir.display());
            }
            let title = args.title.clone().unwrap_or_else(|| title_from(&prompt));
            engine
                .submit_new(&title, &dir.to_string_lossy(), &prompt)
                .await
                .map(|(session, _)| session.id)
        }
    };
    let session_id = match admitted {
        Ok(session_id) => session_id,
        Err(error) => {
            if args.json {
                let label = match &error {
                    steward_engine::Error::SessionBusy { .. } => "busy",
                    _ => "refused",
                };
                out!(
                    "{}",
                    json!({"type": "run.finished", "session_id": args.session, "outcome": label, "error": error.to_string()})
                );
            }
            return Err(error.into());
        }
    };
    if !args.json {
        say!("session {session_id}");
    }
    let mut printer = Printer {
        json: args.json,
        session_id: session_id.clone(),
        mid_line: false,
        shown_failure: false,
        printable: Default::default(),
    };
    let mut interrupted = false;
    let outcome = {
        let idle = engine.wait_idle(&session_id);
        tokio::pin!(idle);
        loop {
            tokio::select! {
                outcome = &mut idle => break outcome,
                event = events.recv() => match event {
                    Ok(event) => printer.show(&event),
                    Err(RecvError::Lagged(_)) => {}
                    Err(RecvError::Closed) => {}
                },
                _ = interrupt.cancelled(), if !interrupted => {
                    interrupted = true;
                    engine.cancel(&session_id);
                }
            }
        }
    };
    while let Ok(event) = events.try_recv() {
        printer.show(&event);
    }
    printer.end_line();
    let (code, label, detail) = match &outcome {
        _ if interrupted => (exit::INTERRUPTED, "cancelled", None),
        Some(SessionOutcome::Ran(Outcome::Idle)) | None => (0, "idle", None),
        Some(SessionOutcome::Ran(Outcome::Cancelled)) => (exit::INTERRUPTED, "cancelled", None),
        Some(SessionOutcome::Ran(Outcome::Failed(m))) => (exit::FAILURE, "failed", Some(m.clone())),
        Some(SessionOutcome::Ran(Outcome::Lost)) => (
            exit::FAILURE,
            "lost",
            Some("another owner took the session over".to_string()),
        ),
        Some(SessionOutcome::Ran(Outcome::Error(m)) | SessionOutcome::Error(m)) => {
            (exit::FAILURE, "error", Some(m.clone()))
        }
        Some(SessionOutcome::Busy { owner_id }) => (
            exit::BUSY,
            "busy",
            Some(format!("the session is held by owner {owner_id}")),
        ),
        Some(SessionOutcome::AwaitingRecovery { execution_id }) => (
            exit::FAILURE,
            "waiting",
            Some(format!("execution {execution_id} waits for recovery")),
        ),
        Some(SessionOutcome::Quarantined {
            execution_id,
            reason,
        }) => (
            exit::FAILURE,
            "quarantined",
            Some(format!("execution {execution_id} is quarantined: {reason}")),
        ),
        Some(outcome @ SessionOutcome::WaitsForProvider { .. }) => (
            exit::FAILURE,
            "waiting",
            Some(format!("the session {outcome}")),
        ),
        Some(SessionOutcome::Stopped) => (
            exit::FAILURE,
            "stopped",
            Some("the engine stopped; the session is left for recovery".to_string()),
        ),
    };
    if args.json {
        out!(
            "{}",
            json!({"type": "run.finished", "session_id": session_id, "outcome": label, "error": detail})
        );
    } else if let Some(detail) = detail.as_ref().filter(|_| !printer.shown_failure) {
        say!("steward: {detail}");
    } else if interrupted {
        say!("steward: cancelled");
    }
    Ok(ExitCode::from(code))
}

struct Printer {
    json: bool,
    session_id: String,
    mid_line: bool,
    /// A failed step was already reported as it happened.
    shown_failure: bool,
    /// The streamed text, filtered for the terminal across its chunks.
    printable: steward_engine::printable::Printable,
}

impl Printer {
    fn show(&mut self, event: &EngineEvent) {
        let EngineEvent::Committed(record) = event else {
            return;
        };
        if record.session_id != self.session_id {
            return;
        }
        if self.json {
            out!("{}", event_json(record));
            return;
        }
        match &record.event {
            Event::StepStarted {
                tools: Some(tools), ..
            } => {
                // A server that did not start is said, not silently missing.
                for missing in &tools.unavailable {
                    self.end_line();
                    say!(
                        "steward: MCP server `{}` {}",
                        steward_engine::printable::clean(&missing.server),
                        steward_engine::printable::clean(&missing.error)
                    );
                }
            }
            Event::StepText { text, .. } => {
                let text = self.printable.push(text);
                crate::output::write(format_args!("{text}"));
                if !text.is_empty() {
                    self.mid_line = !text.ends_with('\n');
                }
            }
            Event::StepEnded { warnings, .. } => {
                // A sequence a step left open ends with it: the next step's text is
                // shown whatever the last one sent.
                self.printable = Default::default();
                self.end_line();
                for warning in warnings {
                    say!(
                        "steward: warning: {}",
                        steward_engine::printable::clean(warning)
                    );
                }
            }
            Event::ToolCalled { tool, input, .. } => {
                self.end_line();
                let clean = steward_engine::printable::clean;
                say!("→ {} {}", clean(tool), clean(&input.to_string()));
            }
            Event::ToolCompleted { output, .. } => {
                let lines = output.lines().count();
                say!(
                    "  ✓ done ({lines} line{} of output)",
                    if lines == 1 { "" } else { "s" }
                );
            }
            Event::ToolFailed { error, .. } => {
                say!("  ✗ {}", steward_engine::printable::clean(error));
            }
            Event::StepFailed { error, .. } => {
                self.printable = Default::default();
                self.end_line();
                say!(
                    "steward: the step failed: {}",
                    steward_engine::printable::clean(&error.message)
                );
                self.shown_failure = true;
            }
            _ => {}
        }
    }

    fn end_line(&mut self) {
        if self.mid_line && !self.json {
            out!("");
        }
        self.mid_line = false;
    }
}

fn event_json(record: &EventRecord) -> serde_json::Value {
    let data: serde_json::Value =
        serde_json::from_str(&record.event.data_json()).unwrap_or_default();
    json!({
        "type": record.event.kind(),
        "session_id": record.session_id,
        "seq": record.seq,
        "time_created": record.time_created,
        "data": data,
    })
}
