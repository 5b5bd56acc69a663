//! Running the tool calls of a step, one after another: permission, preparation
//! (a process tool starts gated), `tool.started` with the process identity as the
//! dispatch boundary, the run, and `tool.completed` / `tool.failed`.

use serde_json::Value;

use crate::config::ToolsConfig;
use crate::events::Event;
use crate::provider::ToolCall;
use crate::runner::{Execution, Flow, Stop};
use crate::tools::{Decision, PermissionRequest, StopSignals, ToolContext, ToolOutput};

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
        let Some(tool) = self.services.tools.get(&call.tool) else {
            return Ok(Err(format!("unknown tool `{}`", call.tool)));
        };
        if let Value::String(raw) = &call.input {
            return Ok(Err(format!("invalid arguments (not a JSON object): {raw}")));
        }
        let tools: &ToolsConfig = &self.services.config.tools;
        if !tools.allow.iter().any(|t| t == &call.tool) {
            let request = PermissionRequest {
                session_id: self.claim.session_id.clone(),
                call_id: call.call_id.clone(),
                tool: call.tool.clone(),
                input: call.input.clone(),
            };
            let decision = tokio::select! {
                _ = self.cancel.cancelled() => return Err(Stop::Cancelled),
                _ = self.lost.cancelled() => return Err(Stop::Lost),
                d = self.services.permission.decide(request) => d,
            };
            if let Decision::Deny(reason) = decision {
                return Ok(Err(reason));
            }
        }
        let ctx = ToolContext {
            directory: self.session.directory.clone().into(),
            config: tools.clone(),
        };
        self.may_dispatch()?;
        let prepared = match tool.prepare(&ctx, &call.input).await {
            Ok(prepared) => prepared,
            Err(error) => return Ok(Err(error)),
        };
        // The dispatch boundary: `tool.started` (with the process identity) commits
        // before the tool may do anything that matters. If it fails, dropping
        // `prepared` stops the gated process.
        let (id, call_id, process) = (
            message_id.to_string(),
            call.call_id.clone(),
            prepared.process.clone(),
        );
        self.may_dispatch()?;
        self.commit(move |f| {
            f.append(Event::ToolStarted {
                message_id: id,
                call_id,
                process,
            })
            .map(drop)
        })
        .await?;
        // The commit may have waited for the writer: look again before starting.
        self.may_dispatch()?;
        crate::failpoint!("runner.after_tool_dispatch");
        let stop = StopSignals {
            cancel: self.cancel.clone(),
            abort: self.lost.clone(),
        };
        match prepared.run(stop).await {
            ToolOutput::Completed { output, structured } => Ok(Ok((output, structured))),
            ToolOutput::Failed(error) => Ok(Err(error)),
            ToolOutput::Stopped => {
                self.check_stop()?;
                Ok(Err("the tool was stopped".into()))
            }
        }
    }
}
