//! Tools the agent calls: `read_file`, `list_dir`, `write_file`, `run_command`, and
//! the permission policy that decides whether a call may run.
//!
//! A call is assessed first ([`Tool::assess`]: does it reach outside the session's
//! directory?), then prepared ([`Tool::prepare`]) and run ([`Prepared::run`]).
//! Between preparing and running the runner commits `tool.started` — with the
//! process identity when the tool has a process — so nothing that matters happens
//! before the transcript knows the tool is running and which process is it. The
//! runner races every run against cancellation, claim loss and [`Tool::timeout`].

pub mod command;
pub mod diff;
pub mod edit;
pub mod fs;
#[doc(hidden)]
pub mod process;
pub mod reach;
pub mod search;

pub use diff::{Basis, FileDiff};
pub use reach::{Guard, Guarded};

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::config::ToolsConfig;
use crate::message::{McpCall, ProcessIdentity};
use crate::provider::ToolSpec;

/// A boxed future.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// Where and how a call runs.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// The session's directory: the base of relative paths and the commands' cwd.
    pub directory: PathBuf,
    pub config: ToolsConfig,
    /// Steward's data directory: guarded like a credential location.
    pub data_dir: Option<PathBuf>,
    /// The guarded path the user allowed this call to touch, exactly as it was
    /// resolved when they were asked ([`reach::located_for_run`]).
    pub approved: Option<Guarded>,
    /// What the permission question showed of the file this call changes: the
    /// run refuses a file that holds something else by then (protocol §4.19).
    pub shown: Option<Basis>,
    /// The editor's buffers, when the session's client offers them (ACP `fs`):
    /// file tools read and write through them (protocol §4.19).
    pub client: Option<Arc<dyn ClientFiles>>,
}

/// Files read and written through a client's editor (ACP `fs/read_text_file`,
/// `fs/write_text_file`): unsaved changes are seen, and edits land in its undo
/// history.
pub trait ClientFiles: Send + Sync + fmt::Debug {
    /// Whether the client reads files for Steward.
    fn reads(&self) -> bool;
    /// Whether the client writes files for Steward.
    fn writes(&self) -> bool;
    /// The text of `path` as the client has it (its buffer, if open).
    fn read(&self, path: &Path) -> BoxFuture<Result<String, String>>;
    /// Writes `content` to `path` through the client.
    fn write(&self, path: &Path, content: String) -> BoxFuture<Result<(), String>>;
}

impl ToolContext {
    /// `path` made absolute against the session's directory, without looking at the
    /// file system.
    pub fn resolve(&self, path: &str) -> PathBuf {
        let path = Path::new(path);
        if path.is_absolute() {
            path.to_path_buf()
        } else {
            self.directory.join(path)
        }
    }

    /// Locates `path` ([`reach::locate`]).
    pub fn locate(&self, path: &str) -> Result<reach::Located, String> {
        reach::locate(self, path)
    }
}

/// What a call would touch before it runs: a guarded path ([`reach`]) needs the
/// user's permission every time, whatever `tools.allow` says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Assessment {
    /// The guarded path the call would touch, resolved, if any.
    pub guarded: Option<Guarded>,
    /// What the call would change in a file, for the question (an edit's preview).
    pub diff: Option<FileDiff>,
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

/// What hears a command's output as it comes, and from which of its pipes.
pub type Heard = Arc<dyn Fn(Pipe, &str) + Send + Sync>;

/// A command's output pipe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pipe {
    Stdout,
    Stderr,
}

/// What stops a running call: `cancel` asks politely (SIGTERM, a grace period, then
/// SIGKILL); `abort` kills at once (the owner lost its claim). `output` hears a
/// command's output as it comes (live, not durable).
#[derive(Clone, Default)]
pub struct StopSignals {
    pub cancel: CancellationToken,
    pub abort: CancellationToken,
    pub output: Option<Heard>,
}

impl fmt::Debug for StopSignals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StopSignals")
            .field("cancel", &self.cancel)
            .field("abort", &self.abort)
            .finish()
    }
}

/// A call ready to run.
pub struct Prepared {
    /// The call's process group, when it has one; recorded in `tool.started`.
    pub process: Option<ProcessIdentity>,
    /// For an MCP call: the request it will be sent as, held until it runs;
    /// recorded in `tool.started`.
    pub mcp: Option<McpCall>,
    run: Box<dyn FnOnce(StopSignals) -> BoxFuture<ToolOutput> + Send>,
}

impl fmt::Debug for Prepared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Prepared")
            .field("process", &self.process)
            .field("mcp", &self.mcp)
            .finish()
    }
}

impl Prepared {
    /// A call ready to run: `run` starts it; its process (if any) is already gated.
    pub fn new(
        process: Option<ProcessIdentity>,
        run: impl FnOnce(StopSignals) -> BoxFuture<ToolOutput> + Send + 'static,
    ) -> Prepared {
        Prepared {
            process,
            mcp: None,
            run: Box::new(run),
        }
    }

    /// The MCP request this call will be sent as.
    pub fn with_mcp(mut self, call: McpCall) -> Prepared {
        self.mcp = Some(call);
        self
    }

    /// Starts the call. Dropping a `Prepared` without running it stops its process.
    pub fn run(self, stop: StopSignals) -> BoxFuture<ToolOutput> {
        (self.run)(stop)
    }
}

/// One tool.
pub trait Tool: Send + Sync + fmt::Debug {
    /// The tool's name, description and JSON Schema for the provider.
    fn spec(&self) -> ToolSpec;
    /// What the call would touch (no side effect). Errors are the tool's failure
    /// message.
    fn assess(&self, _ctx: &ToolContext, _input: &Value) -> Result<Assessment, String> {
        Ok(Assessment::default())
    }
    /// What the call would change in a file as the session's client has it (its
    /// editor buffer), when the call goes through the client: the question shows
    /// that rather than the disk's ([`Assessment::diff`]). `None` otherwise; an
    /// error when the buffer shows the call cannot succeed (it then fails unasked).
    fn preview(
        &self,
        _ctx: &ToolContext,
        _input: &Value,
    ) -> BoxFuture<Result<Option<FileDiff>, String>> {
        Box::pin(async { Ok(None) })
    }
    /// Validates `input` and readies the call; a process tool starts its process
    /// held at a gate. Errors are the tool's failure message.
    fn prepare(&self, ctx: &ToolContext, input: &Value) -> BoxFuture<Result<Prepared, String>>;
    /// How long a run may take before the runner gives up on it.
    fn timeout(&self, ctx: &ToolContext, _input: &Value) -> std::time::Duration {
        std::time::Duration::from_millis(ctx.config.command_timeout_ms)
    }
}

/// The tools by name.
#[derive(Debug, Clone, Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Arc<dyn Tool>>,
}

impl ToolRegistry {
    /// `read_file`, `list_dir`, `write_file`, `edit_file`, `grep`, `glob`,
    /// `run_command`.
    pub fn standard() -> ToolRegistry {
        let mut registry = ToolRegistry::default();
        registry.add(Arc::new(fs::ReadFile));
        registry.add(Arc::new(fs::ListDir));
        registry.add(Arc::new(fs::WriteFile));
        registry.add(Arc::new(edit::EditFile));
        registry.add(Arc::new(search::Grep));
        registry.add(Arc::new(search::Glob));
        registry.add(Arc::new(command::RunCommand));
        registry
    }

    /// Adds (or replaces, by name) a tool.
    pub fn add(&mut self, tool: Arc<dyn Tool>) {
        self.tools.insert(tool.spec().name, tool);
    }

    /// The tool named `name`.
    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.tools.get(name).cloned()
    }

    /// Every tool's spec, for the provider.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools.values().map(|t| t.spec()).collect()
    }
}

/// A call that is not in `tools.allow`, or that touches a guarded path, asks before
/// it runs.
#[derive(Debug, Clone, PartialEq)]
pub struct PermissionRequest {
    pub session_id: String,
    pub call_id: String,
    pub tool: String,
    pub input: Value,
    /// The guarded path the call would touch, resolved: asked about every time, so
    /// no "always" is offered for it.
    pub guarded: Option<Guarded>,
    /// What the call would change in a file, shown with the question.
    pub diff: Option<Box<FileDiff>>,
}

/// The answer to a permission request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// This call may run.
    Allow,
    /// This call may run, and the tool runs without asking in this session for as
    /// long as this engine runs ([`AlwaysAllowed`]). A call that touches a guarded
    /// path is allowed once all the same: those ask every time.
    AllowAlways,
    Deny(String),
}

/// The one rule for "always allow" answers, for every front end: a tool allowed
/// always runs without asking in *that session* while this engine runs; a tool added
/// to `tools.allow` while it runs (the terminal interface's "save") runs without
/// asking everywhere. Neither ever covers a guarded path.
#[derive(Debug, Default)]
pub struct AlwaysAllowed {
    sessions: std::sync::Mutex<std::collections::BTreeSet<(String, String)>>,
    everywhere: std::sync::Mutex<std::collections::BTreeSet<String>>,
}

impl AlwaysAllowed {
    /// Whether `tool` runs without asking in `session` (beyond `tools.allow`).
    pub fn allows(&self, session: &str, tool: &str) -> bool {
        let everywhere = self.everywhere.lock().unwrap_or_else(|e| e.into_inner());
        let sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        everywhere.contains(tool) || sessions.contains(&(session.to_string(), tool.to_string()))
    }

    /// Remembers an "always" answer for `tool` in `session`.
    pub fn remember(&self, session: &str, tool: &str) {
        self.sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert((session.to_string(), tool.to_string()));
    }

    /// Lets `tool` run without asking in every session from now on.
    pub fn everywhere(&self, tool: &str) {
        self.everywhere
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(tool.to_string());
    }
}

/// Who answers permission requests: the TUI, an ACP client, or a headless policy.
pub trait Permission: Send + Sync + fmt::Debug {
    /// Answers `request`; may wait for the user.
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
        } else if let Some(guarded) = &request.guarded {
            Decision::Deny(format!(
                "Permission denied: `{}` would touch {}, {} (pass --yes to allow)",
                request.tool,
                guarded.path.display(),
                guarded.guard.describe()
            ))
        } else {
            Decision::Deny(format!(
                "Permission denied: `{}` is not in tools.allow (pass --yes to allow every tool)",
                request.tool
            ))
        };
        Box::pin(async move { decision })
    }
}

/// `text` with the values of the environment variables `hidden` names (the
/// provider's API key) replaced by `<redacted>`: a tool that reads them anyway (a
/// file tool allowed to read `/proc/self/environ`, say) never hands them to the
/// transcript or the provider.
pub(crate) fn scrub_secrets(text: String, hidden: &[String]) -> String {
    let values: Vec<String> = hidden
        .iter()
        .filter_map(|name| std::env::var(name).ok())
        .collect();
    scrub_values(text, &values)
}

/// Refuses a write that would put `<redacted>` where the file holds a value Steward
/// hides: the model saw `<redacted>` there, and writing back what it saw would
/// destroy the value — with a diff that, scrubbed, shows no change (§4.19).
pub(crate) fn keeps_hidden_values(
    hidden: &[String],
    old: Option<&str>,
    new: &str,
    path: &Path,
) -> Result<(), String> {
    let Some(old) = old else {
        return Ok(());
    };
    let held = hidden
        .iter()
        .filter_map(|name| std::env::var(name).ok())
        .filter(|v| v.len() >= 4)
        .any(|v| old.contains(&v) && !new.contains(&v));
    if held && new.contains("<redacted>") {
        return Err(format!(
            "{} holds a value Steward hides (you see it as <redacted>): writing <redacted> in its place would destroy it; nothing was written — change the lines around it with edit_file",
            path.display()
        ));
    }
    Ok(())
}

/// `text` with each of `values` (of 4 bytes or more) replaced by `<redacted>`,
/// and so is what is left of one cut short where the text was cut.
fn scrub_values(mut text: String, values: &[String]) -> String {
    for value in values.iter().filter(|v| v.len() >= 4) {
        if text.contains(value.as_str()) {
            text = text.replace(value.as_str(), "<redacted>");
        }
        text = redact_cut(text, value);
    }
    text
}

/// `text` with the beginnings of `value` that were cut short where the text was
/// cut — at its end, or before a note Steward added (`\n[output truncated]`,
/// `\n[stderr]`) — redacted too: most of a key is as good as the key.
fn redact_cut(text: String, value: &str) -> String {
    // Shorter beginnings are as likely the text's own.
    let least = 8.min(value.len() - 1);
    if !value.is_char_boundary(least) {
        return text;
    }
    let start = &value[..least];
    if !text.contains(start) {
        return text;
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(at) = rest.find(start) {
        let tail = &rest[at..];
        let n = (least..value.len())
            .rev()
            .find(|&n| value.is_char_boundary(n) && tail.starts_with(&value[..n]))
            .unwrap_or(least);
        let after = &tail[n..];
        out.push_str(&rest[..at]);
        if after.is_empty() || after.starts_with("\n[") {
            out.push_str("<redacted>");
        } else {
            out.push_str(&tail[..n]);
        }
        rest = after;
    }
    out.push_str(rest);
    out
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

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn i13_a_hidden_value_cut_where_the_text_was_cut_is_redacted_too() {
        let key = vec!["sk-live-ABCDEF0123456789".to_string()];
        let scrub = |t: &str| scrub_values(t.to_string(), &key);
        assert_eq!(scrub("k=sk-live-ABCDEF0123456789\n"), "k=<redacted>\n");
        // Cut at the end of the text, or before a note Steward adds.
        assert_eq!(scrub("xxxsk-live-ABCD"), "xxx<redacted>");
        assert_eq!(
            scrub("yyysk-live-ABCD\n[output truncated]"),
            "yyy<redacted>\n[output truncated]"
        );
        assert_eq!(
            scrub("out sk-live-AB\n[stderr]\nerr"),
            "out <redacted>\n[stderr]\nerr"
        );
        // A short beginning, or one the text goes on from, is the text's own.
        assert_eq!(scrub("ends with sk-li"), "ends with sk-li");
        assert_eq!(scrub("sk-live-ABC is a prefix"), "sk-live-ABC is a prefix");
    }
}
