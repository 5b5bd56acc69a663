//! `steward show SESSION [--json]`: the transcript, synthetic messages and tool states
//! included. Never recovers or runs anything.

use std::process::ExitCode;

use anyhow::{Result, bail};
use serde_json::{Value, json};
use steward_engine::message::{MessageData, Part};
use steward_engine::store::{Store, rows};

use crate::output::out;

pub fn run(store: &Store, session_id: &str, json: bool) -> Result<ExitCode> {
    let conn = store.conn();
    let Some(session) = rows::session(conn, session_id)? else {
        bail!("session {session_id} not found");
    };
    let messages = rows::messages(conn, session_id)?;
    let pending = rows::pending_inputs(conn, session_id)?;
    if json {
        let messages: Vec<Value> = messages
            .iter()
            .map(|m| {
                json!({"id": m.id, "type": m.data.kind().as_str(), "seq": m.seq,
                       "time_created": m.time_created,
                       "data": serde_json::from_str::<Value>(&m.data.to_json()).unwrap_or(Value::Null)})
            })
            .collect();
        let pending: Vec<Value> = pending
            .iter()
            .map(|i| {
                json!({"id": i.id, "prompt": i.prompt, "delivery": i.delivery.as_str(),
                       "admitted_seq": i.admitted_seq, "wake_pending": i.wake_pending,
                       "time_created": i.time_created})
            })
            .collect();
        let out = json!({
            "session": {"id": session.id, "title": session.title, "directory": session.directory,
                        "time_created": session.time_created, "time_updated": session.time_updated},
            "messages": messages,
            "pending_inputs": pending,
        });
        out!("{out}");
        return Ok(ExitCode::SUCCESS);
    }
    // A call a quarantined execution left open reads as of unknown outcome, with the
    // quarantine's reason, as the terminal interface shows it (display only).
    let quarantined = {
        let mut stmt = conn.prepare(
            "SELECT id, recovery_error FROM session_execution
             WHERE session_id = ?1 AND recovery_error IS NOT NULL
             UNION ALL
             SELECT execution_id, recovery_error FROM session_recovery
             WHERE session_id = ?1 AND recovery_error IS NOT NULL",
        )?;
        stmt.query_map([session_id], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<Vec<(String, String)>, _>>()?
    };
    let messages = steward_tui::view::transcript::with_quarantine(&messages, &quarantined);
    // What models and tools wrote is shown, never sent to the terminal as control
    // sequences.
    let clean = steward_engine::printable::clean;
    out!(
        "{}  {}  ({})",
        session.id,
        clean(&session.title),
        clean(&session.directory)
    );
    for m in &messages {
        out!("");
        match &m.data {
            MessageData::User(u) => out!("you: {}", clean(&u.text)),
            MessageData::Synthetic(s) => match &s.label {
                Some(label) => out!("[{label}] {}", clean(&s.text)),
                None => out!("[steward] {}", clean(&s.text)),
            },
            MessageData::Assistant(a) => {
                out!("assistant ({}/{}):", clean(&a.provider), clean(&a.model));
                for part in &a.parts {
                    match part {
                        Part::Text { text, .. } => out!("{}", clean(text)),
                        Part::Reasoning { text, redacted, .. } => {
                            if redacted.is_some() {
                                out!("  (thinking, redacted)");
                            } else {
                                for line in clean(text).lines() {
                                    out!("  (thinking) {line}");
                                }
                            }
                        }
                        Part::Tool(t) => {
                            let unknown = t.state.status.is_open()
                                && t.state.error.as_deref().is_some_and(|e| {
                                    e.starts_with(steward_tui::view::transcript::QUARANTINED_TOOL)
                                });
                            out!(
                                "  [{} {}] {}",
                                clean(&t.tool),
                                if unknown {
                                    "outcome unknown"
                                } else {
                                    t.state.status.as_str()
                                },
                                clean(&t.state.input.to_string())
                            );
                            if let Some(error) = &t.state.error {
                                out!("    error: {}", clean(error));
                            }
                            let diff = t
                                .state
                                .structured
                                .as_ref()
                                .and_then(|s| s.get("diff"))
                                .and_then(|d| {
                                    serde_json::from_value::<steward_engine::tools::FileDiff>(
                                        d.clone(),
                                    )
                                    .ok()
                                });
                            if let Some(diff) = diff {
                                let unified = clean(&diff.unified());
                                let total = unified.lines().count();
                                for line in unified.lines().take(DIFF_LINES) {
                                    out!("    {line}");
                                }
                                if total > DIFF_LINES {
                                    out!(
                                        "    … {} more lines of the diff (--json has them)",
                                        total - DIFF_LINES
                                    );
                                }
                                // The diff's own "[diff truncated]" is past the cut.
                                if diff.truncated && total > DIFF_LINES {
                                    out!(
                                        "    (the diff was cut when it was kept: a side was longer than {} KiB)",
                                        steward_engine::tools::diff::MAX_SIDE / 1024
                                    );
                                }
                            } else if let Some(output) = &t.state.output {
                                for line in clean(output).lines().take(20) {
                                    out!("    {line}");
                                }
                            }
                        }
                    }
                }
                // Recovery writes its text as a part too: say it once.
                let said = a.parts.iter().any(
                    |p| matches!(p, Part::Text { id, text } if id.starts_with("recovery:") && *text == error_message(a)),
                );
                if let Some(error) = a.error.as_ref().filter(|_| !said) {
                    out!("  ({}: {})", error.kind, clean(&error.message));
                }
            }
        }
    }
    for input in &pending {
        out!(
            "\n(pending {}) {}",
            input.delivery.as_str(),
            clean(&input.prompt)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The most lines of an edit's diff the transcript prints.
const DIFF_LINES: usize = 40;

fn error_message(a: &steward_engine::message::AssistantData) -> &str {
    a.error
        .as_ref()
        .map(|e| e.message.as_str())
        .unwrap_or_default()
}
