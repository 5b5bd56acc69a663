//! `run_command {command, timeout_ms?}`: `sh -c` in the session's directory, in its
//! own process group, output captured and capped. See [`super::process`] for how the
//! process is kept from outliving Steward.

use std::time::Duration;

use serde_json::{Value, json};

use crate::provider::ToolSpec;
use crate::tools::process::{Exit, GatedProcess};
use crate::tools::{BoxFuture, Prepared, Tool, ToolContext, ToolOutput, string_arg};

/// `run_command`: a shell command in the session's directory.
#[derive(Debug)]
pub struct RunCommand;

/// The command's own timeout (`timeout_ms`, else `tools.command_timeout_ms`).
fn command_timeout(ctx: &ToolContext, input: &Value) -> u64 {
    input
        .get("timeout_ms")
        .and_then(Value::as_u64)
        .unwrap_or(ctx.config.command_timeout_ms)
}

impl Tool for RunCommand {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "run_command".into(),
            description:
                "Run a shell command (sh -c) in the session directory and return its output.".into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "command": {"type": "string"},
                    "timeout_ms": {"type": "integer", "description": "Stop the command after this long"}
                },
                "required": ["command"]
            }),
        }
    }

    fn prepare(&self, ctx: &ToolContext, input: &Value) -> BoxFuture<Result<Prepared, String>> {
        let command = string_arg(input, "command").map(str::to_string);
        let timeout = command_timeout(ctx, input);
        let ctx = ctx.clone();
        Box::pin(async move {
            let command = command?;
            let process = GatedProcess::spawn(&command, &ctx.directory, &ctx.config.hidden_env)
                .await
                .map_err(|e| format!("cannot start the command: {e}"))?;
            let identity = process.identity.clone();
            let limit = ctx.config.output_limit_bytes;
            let grace = Duration::from_millis(ctx.config.kill_grace_ms);
            Ok(Prepared::new(Some(identity), move |stop| {
                Box::pin(async move {
                    let done = match process
                        .run(Duration::from_millis(timeout), limit, grace, stop)
                        .await
                    {
                        Ok(done) => done,
                        Err(e) => {
                            return ToolOutput::Failed(format!("the command failed to run: {e}"));
                        }
                    };
                    let mut output = String::from_utf8_lossy(&done.stdout).into_owned();
                    if !done.stderr.is_empty() {
                        if !output.is_empty() && !output.ends_with('\n') {
                            output.push('\n');
                        }
                        output.push_str("[stderr]\n");
                        output.push_str(&String::from_utf8_lossy(&done.stderr));
                    }
                    if done.truncated {
                        output.push_str("\n[output truncated]");
                    }
                    match done.exit {
                        Exit::Exited(code) => ToolOutput::Completed {
                            output,
                            structured: Some(
                                json!({"exit_code": code, "truncated": done.truncated}),
                            ),
                        },
                        Exit::TimedOut => ToolOutput::Failed(format!(
                            "the command timed out after {timeout} ms and was stopped\n{output}"
                        )),
                        Exit::Cancelled | Exit::Aborted => ToolOutput::Stopped,
                    }
                })
            }))
        })
    }

    /// The command stops itself at its own timeout (SIGTERM, the grace, SIGKILL);
    /// the runner's bound lies beyond that.
    fn timeout(&self, ctx: &ToolContext, input: &Value) -> Duration {
        Duration::from_millis(command_timeout(ctx, input))
            + Duration::from_millis(ctx.config.kill_grace_ms)
            + Duration::from_secs(2)
    }
}
