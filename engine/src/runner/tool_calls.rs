//! Running the tool calls of a step, one after another: assessment and permission
//! (a call outside `tools.allow`, or reaching outside the session's directory, asks),
//! preparation (a process tool starts gated), `tool.started` with the process
//! identity as the dispatch boundary, the run — raced against cancellation, claim
//! loss and the tool's timeout — and `tool.completed` / `tool.failed`.

use std::time::Duration;

use serde_json::Value;

use crate::config::ToolsConfig;
use crate::events::Event;
use crate::provider::ToolCall;
use crate::runner::{Execution, Flow, Stop};
use crate::tools::{Decision, PermissionRequest, StopSignals, ToolContext, ToolOutput};

/// How long past its kill grace a stopped tool may take to end before the runner
/// stops waiting for it.
const STOP_MARGIN: Duration = Duration::from_millis(1_000);

impl Execution {
    pub(crate) async fn run_tools(&mut self, calls: Vec<(String, ToolCall)>) -> Flow<()> {
        let message_id = self.current_message.clone().ok_or_else(|| {
            Stop::Failed(crate::Error::Invalid(
                "tool calls without an assistant".into(),
            ))
        })?;
        for (_, call) in calls {
            self.check_stop()?;
            let output = self.run_tool(&message_id, &call).await?;
            let (message_id, call_id) = (message_id.clone(), call.call_id.clone());
            self.commit(move |f| {
                let event = match output {
                    Ok((output, structured)) => Event::ToolCompleted {
                        message_id,
                        call_id,
                        output,
                        structured,
                    },
                    Err(error) => Event::ToolFailed {
                        message_id,
                        call_id,
                        error,
                    },
                };
                f.append(event).map(drop)
            })
            .await?;
            crate::failpoint!("runner.after_tool_completed");
        }
        Ok(())
    }

    /// Runs one call to its result (or stops the execution).
    async fn run_tool(
        &mut self,
        message_id: &str,
        call: &ToolCall,
    ) -> Flow<Result<(String, Option<Value>), String>> {
        let Some(tool) = self
            .services
            .tools
            .get(&call.tool)
            .or_else(|| self.offered.get(&call.tool).cloned())
        else {
            return Ok(Err(format!("unknown tool `{}`", call.tool)));
        };
        if let Value::String(raw) = &call.input {
            return Ok(Err(format!("invalid arguments (not a JSON object): {raw}")));
        }
        let tools: &ToolsConfig = &self.services.config.tools;
        let mut ctx = ToolContext {
            directory: self.session.directory.clone().into(),
            config: tools.clone(),
            data_dir: self
                .services
                .db
                .path()
                .and_then(|p| p.parent())
                .map(Into::into),
            approved: None,
            shown: None,
            client: self
                .services
                .client_files
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&self.claim.session_id)
                .cloned(),
        };
        // Resolving paths touches the file system, which can hang (a stuck mount):
        // it runs on a thread of its own, raced against cancellation and loss.
        let assessed = {
            let (tool, ctx, input) = (tool.clone(), ctx.clone(), call.input.clone());
            let (done, result) = tokio::sync::oneshot::channel();
            std::thread::Builder::new()
                .name("steward-tool-assess".into())
                .spawn(move || {
                    let _ = done.send(tool.assess(&ctx, &input));
                })
                .map_err(|e| Stop::Failed(crate::Error::Io(e)))?;
            tokio::select! {
                _ = self.cancel.cancelled() => return Err(Stop::Cancelled),
                _ = self.lost.cancelled() => return Err(Stop::Lost),
                assessed = result => assessed.unwrap_or_else(|_| Err("the tool panicked".into())),
            }
        };
        let assessment = match assessed {
            Ok(assessment) => assessment,
            Err(error) => return Ok(Err(error)),
        };
        let session = &self.claim.session_id;
        let allowed = tools
            .allow
            .iter()
            .any(|t| crate::mcp::allows(t, &call.tool))
            || self.services.always.allows(session, &call.tool);
        if !allowed || assessment.guarded.is_some() {
            // Through the client, the question shows the change to its buffer — if
            // the client answers within the tool's own time limit.
            let limit = tool.timeout(&ctx, &call.input);
            let preview = tokio::select! {
                _ = self.cancel.cancelled() => return Err(Stop::Cancelled),
                _ = self.lost.cancelled() => return Err(Stop::Lost),
                preview = tokio::time::timeout(limit, tool.preview(&ctx, &call.input)) => preview,
            };
            let diff = match preview {
                // The buffer shows the call cannot succeed: it fails unasked.
                Ok(Err(error)) => return Ok(Err(error)),
                Ok(Ok(diff)) => diff,
                Err(_) => None,
            }
            .or(assessment.diff.clone())
            .map(|diff| Box::new(scrub_diff(diff, &tools.hidden_env)));
            let shown = diff.as_ref().and_then(|d| d.basis.clone());
            let request = PermissionRequest {
                session_id: session.clone(),
                call_id: call.call_id.clone(),
                tool: call.tool.clone(),
                input: call.input.clone(),
                guarded: assessment.guarded.clone(),
                diff,
            };
            let decision = tokio::select! {
                _ = self.cancel.cancelled() => return Err(Stop::Cancelled),
                _ = self.lost.cancelled() => return Err(Stop::Lost),
                d = self.services.permission.decide(request) => d,
            };
            match decision {
                Decision::Deny(reason) => return Ok(Err(reason)),
                Decision::AllowAlways if assessment.guarded.is_none() => {
                    self.services.always.remember(session, &call.tool);
                }
                Decision::Allow | Decision::AllowAlways => {}
            }
            // The approval is bound to the path as it was resolved when the user
            // was asked, and to the text the diff was taken from: a run that
            // resolves elsewhere, or finds other text, is refused.
            ctx.approved = assessment.guarded;
            ctx.shown = shown;
        }
        self.may_dispatch()?;
        // Readying may start a process (an MCP server, within its startup limit):
        // it races cancellation and loss, and dropping it stops what it started.
        let prepared = tokio::select! {
            _ = self.cancel.cancelled() => return Err(Stop::Cancelled),
            _ = self.lost.cancelled() => return Err(Stop::Lost),
            prepared = tool.prepare(&ctx, &call.input) => prepared,
        };
        let prepared = match prepared {
            Ok(prepared) => prepared,
            Err(error) => return Ok(Err(error)),
        };
        // The dispatch boundary: `tool.started` (with the process identity, and an
        // MCP call's request) commits before the tool may do anything that matters.
        // If it fails, dropping `prepared` stops the gated process, or drops the
        // held MCP request unsent.
        let (id, call_id, process, mcp) = (
            message_id.to_string(),
            call.call_id.clone(),
            prepared.process.clone(),
            prepared.mcp.clone().map(Box::new),
        );
        self.may_dispatch()?;
        self.commit(move |f| {
            f.append(Event::ToolStarted {
                message_id: id,
                call_id,
                process,
                mcp,
            })
            .map(drop)
        })
        .await?;
        // The commit may have waited for the writer: look again before starting.
        self.may_dispatch()?;
        crate::failpoint!("runner.after_tool_dispatch");
        let output = {
            let (events, session, call_id, hidden) = (
                self.services.events.clone(),
                self.claim.session_id.clone(),
                call.call_id.clone(),
                tools.hidden_env.clone(),
            );
            // A value to hide may come split across pieces: each scrubber holds
            // back a tail that could begin its value until the rest shows
            // whether it does (§4.13, §4.19) — one set per pipe, so that what the
            // other pipe writes in between never releases a held tail.
            let scrubbers = || -> Vec<crate::provider::http::Scrubber> {
                hidden
                    .iter()
                    .filter_map(|name| std::env::var(name).ok())
                    .filter(|value| value.len() >= 4)
                    .map(|value| crate::provider::http::Scrubber::new(Some(&value)))
                    .collect()
            };
            let pipes = std::sync::Mutex::new([scrubbers(), scrubbers()]);
            std::sync::Arc::new(move |pipe: crate::tools::Pipe, text: &str| {
                let mut pipes = pipes.lock().unwrap_or_else(|e| e.into_inner());
                let scrubbers = &mut pipes[usize::from(pipe == crate::tools::Pipe::Stderr)];
                let mut text = Some(text.to_string());
                for scrubber in scrubbers.iter_mut() {
                    text = text.and_then(|t| scrubber.pass(&t));
                }
                let Some(text) = text else {
                    return;
                };
                let _ = events.send(crate::runner::EngineEvent::ToolOutput {
                    session_id: session.clone(),
                    call_id: call_id.clone(),
                    text,
                });
            }) as crate::tools::Heard
        };
        let stop = StopSignals {
            cancel: self.cancel.clone(),
            abort: self.lost.clone(),
            output: Some(output),
        };
        let timeout = tool.timeout(&ctx, &call.input);
        let grace = Duration::from_millis(tools.kill_grace_ms) + STOP_MARGIN;
        let run = prepared.run(stop);
        tokio::pin!(run);
        // The tool sees the stop signals itself (a command is sent SIGTERM, then
        // SIGKILL); a tool that does not end within the grace is abandoned, so no
        // tool can hold an execution — and its claim — for ever.
        let output = tokio::select! {
            output = &mut run => output,
            _ = self.cancel.cancelled() => {
                let _ = tokio::time::timeout(grace, &mut run).await;
                return Err(Stop::Cancelled);
            }
            _ = self.lost.cancelled() => {
                let _ = tokio::time::timeout(grace, &mut run).await;
                return Err(Stop::Lost);
            }
            _ = tokio::time::sleep(timeout) => {
                return Ok(Err(format!(
                    "`{}` did not finish within {} ms and was abandoned",
                    call.tool,
                    timeout.as_millis()
                )));
            }
        };
        let hidden = &tools.hidden_env;
        match output {
            ToolOutput::Completed { output, structured } => Ok(Ok((
                crate::tools::scrub_secrets(output, hidden),
                structured.map(|s| scrub_value(s, hidden)),
            ))),
            ToolOutput::Failed(error) => Ok(Err(crate::tools::scrub_secrets(error, hidden))),
            ToolOutput::Stopped => {
                self.check_stop()?;
                Ok(Err("the tool was stopped".into()))
            }
        }
    }
}

/// `value` with every string scrubbed of the hidden variables' values (§4.13): a
/// tool's structured result (an edit's diff) is kept like its output.
fn scrub_value(value: Value, hidden: &[String]) -> Value {
    match value {
        Value::String(s) => Value::String(crate::tools::scrub_secrets(s, hidden)),
        Value::Array(items) => {
            Value::Array(items.into_iter().map(|v| scrub_value(v, hidden)).collect())
        }
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (k, scrub_value(v, hidden)))
                .collect(),
        ),
        other => other,
    }
}

/// The diff a question shows, scrubbed like what a tool hands back; the text it
/// was taken from is kept whole, to bind the approval to.
fn scrub_diff(mut diff: crate::tools::FileDiff, hidden: &[String]) -> crate::tools::FileDiff {
    diff.old_text = diff
        .old_text
        .map(|t| crate::tools::scrub_secrets(t, hidden));
    diff.new_text = crate::tools::scrub_secrets(diff.new_text, hidden);
    diff
}
