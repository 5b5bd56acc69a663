//! Tools the agent calls: `read_file`, `list_dir`, `write_file`, `run_command`, and
//! the permission policy that decides whether a call may run.
//!
//! A call is prepared first ([`Tool::prepare`]) and run second ([`Prepared::run`]).
//! Between the two the runner commits `tool.started` — with the process identity
//! when the tool has a process — so nothing that matters happens before the
//! transcript knows the tool is running and which process is it.

pub mod command;
pub mod fs;
pub mod process;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::config::ToolsConfig;
use crate::message::ProcessIdentity;
use crate::provider::ToolSpec;

/// A boxed future.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// Where and how a call runs.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// The session's directory: the base of relative paths and the commands' cwd.
    pub directory: PathBuf,
    pub config: ToolsConfig,
}

impl ToolContext {
    pub fn resolve(&self, path: &str) -> PathBuf {
        let path = Path::new(path);
        if path.is_absolute() {
            path.to_path_buf()
        } else {
            self.directory.join(path)
        }
    }
}

/// How a call ended.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolOutput {
    Completed {
        output: String,
        structured: Option<Value>,
    },
    Failed(String),
    /// Stopped by a cancellation; the cancellation itself records the result.
    Stopped,
}

/// What stops a running call: `cancel` asks politely (SIGTERM, a grace period, then
/// SIGKILL); `abort` kills at once (the owner lost its claim).
#[derive(Debug, Clone, Default)]
pub struct StopSignals {
    pub cancel: CancellationToken,
    pub abort: CancellationToken,
}

/// A call ready to run.
pub struct Prepared {
    /// The call's process group, when it has one; recorded in `tool.started`.
    pub process: Option<ProcessIdentity>,
    run: Box<dyn FnOnce(StopSignals) -> BoxFuture<ToolOutput> + Send>,
}

impl fmt::Debug for Prepared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Prepared")
            .field("process", &self.process)
            .finish()
    }
}

impl Prepared {
    pub fn new(
        process: Option<ProcessIdentity>,
        run: impl FnOnce(StopSignals) -> BoxFuture<ToolOutput> + Send + 'static,
    ) -> Prepared {
        Prepared {
            process,
            run: Box::new(run),
        }
    }

    /// Starts the call. Dropping a `Prepared` without running it stops its process.
    pub fn run(self, stop: StopSignals) -> BoxFuture<ToolOutput> {
        (self.run)(stop)
    }
}

/// One tool.
pub trait Tool: Send + Sync + fmt::Debug {
    fn spec(&self) -> ToolSpec;
    /// Validates `input` and readies the call; a process tool starts its process
    /// held at a gate. Errors are the tool's failure message.
    fn prepare(&self, ctx: &ToolContext, input: &Value) -> BoxFuture<Result<Prepared, String>>;
}

/// The tools by name.
#[derive(Debug, Clone, Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Arc<dyn Tool>>,
}

impl ToolRegistry {
    /// `read_file`, `list_dir`, `write_file`, `run_command`.
    pub fn standard() -> ToolRegistry {
        let mut registry = ToolRegistry::default();
        registry.add(Arc::new(fs::ReadFile));
        registry.add(Arc::new(fs::ListDir));
        registry.add(Arc::new(fs::WriteFile));
        registry.add(Arc::new(command::RunCommand));
        registry
    }

    pub fn add(&mut self, tool: Arc<dyn Tool>) {
        self.tools.insert(tool.spec().name, tool);
    }

    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.tools.get(name).cloned()
    }

    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools.values().map(|t| t.spec()).collect()
    }
}

/// A call that is not in `tools.allow` asks before it runs.
#[derive(Debug, Clone, PartialEq)]
pub struct PermissionRequest {
    pub session_id: String,
    pub call_id: String,
    pub tool: String,
    pub input: Value,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow,
    Deny(String),
}

/// Who answers permission requests: the TUI, an ACP client, or a headless policy.
pub trait Permission: Send + Sync + fmt::Debug {
    fn decide(&self, request: PermissionRequest) -> BoxFuture<Decision>;
}

/// Headless `run`: every tool outside `tools.allow` is denied, unless `--yes`.
#[derive(Debug, Clone, Copy)]
pub struct Headless {
    pub allow_all: bool,
}

impl Permission for Headless {
    fn decide(&self, request: PermissionRequest) -> BoxFuture<Decision> {
        let decision = if self.allow_all {
            Decision::Allow
        } else {
            Decision::Deny(format!(
                "Permission denied: `{}` is not in tools.allow (pass --yes to allow every tool)",
                request.tool
            ))
        };
        Box::pin(async move { decision })
    }
}

/// Truncates `text` to at most `limit` bytes on a character boundary, saying so.
pub fn cap_output(mut text: String, limit: usize) -> (String, bool) {
    if text.len() <= limit {
        return (text, false);
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push_str("\n[output truncated]");
    (text, true)
}

/// A string field of a tool input.
pub(crate) fn string_arg<'a>(input: &'a Value, name: &str) -> Result<&'a str, String> {
    input
        .get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("invalid arguments: `{name}` (a string) is required"))
}
