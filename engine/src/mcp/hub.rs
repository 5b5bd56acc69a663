//! The MCP servers of this process, by session (protocol §4.16): started on a
//! session's first step, offered as `SERVER__TOOL`, stopped — and started again on
//! the next call — after a call that timed out, was cancelled or lost its
//! connection, and stopped for good when the engine shuts down (an ACP
//! connection's servers with it: one process serves one connection).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::server::{Answer, Server};
use crate::clock::SharedClock;
use crate::config::McpServerConfig;
use crate::events::Unavailable;
use crate::message::McpCall;
use crate::provider::ToolSpec;
use crate::tools::{BoxFuture, Prepared, StopSignals, Tool, ToolContext, ToolOutput, cap_output};

/// How long a server that failed to start is not tried again for the same session
/// (each step would otherwise wait out its startup limit again).
const RETRY_AFTER: Duration = Duration::from_secs(30);

/// The longest name a tool may be offered under (`SERVER__TOOL`): what providers
/// accept.
pub const MAX_TOOL_NAME: usize = 64;

/// The name a server's tool is offered under: `SERVER__TOOL`, with every character
/// a provider would refuse in a tool name replaced by `_`; `None` when that is longer
/// than [`MAX_TOOL_NAME`].
pub fn offered_name(server: &str, tool: &str) -> Option<String> {
    let tool: String = tool
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let name = format!("{server}__{tool}");
    (!tool.is_empty() && name.len() <= MAX_TOOL_NAME).then_some(name)
}

/// Whether the `tools.allow` entry `pattern` allows the tool `name`: the exact
/// name, or `SERVER__*` for every tool of a server.
pub fn allows(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) if prefix.ends_with("__") => name.starts_with(prefix),
        _ => pattern == name,
    }
}

/// What a step offers from the MCP servers of its session. An [`Unavailable`]'s
/// error reads after the server's name: "MCP server `notes` did not start: …".
#[derive(Debug, Default)]
pub struct Offer {
    /// The tools, by offered name.
    pub tools: BTreeMap<String, Arc<dyn Tool>>,
    /// Servers whose tools are missing, and why.
    pub unavailable: Vec<Unavailable>,
}

/// A server running in this process, for the inspector.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RunningServer {
    pub session_id: String,
    pub server: String,
    /// The server's own process (a stdio server).
    pub pid: Option<i32>,
    /// Its process group, led by the wrapper that stops it with Steward.
    pub group: Option<i32>,
    /// The server's endpoint (an HTTP server).
    pub url: Option<String>,
    pub tools: usize,
    pub since_ms: i64,
}

/// One server's place for one session.
#[derive(Debug, Default)]
struct Slot {
    server: Option<Arc<Server>>,
    /// The last failure to start, with the settings it failed with.
    failed: Option<(Instant, String, String)>,
}

type SlotKey = (String, String);

#[derive(Debug)]
struct Inner {
    configured: BTreeMap<String, McpServerConfig>,
    hidden_env: Vec<String>,
    grace: Duration,
    clock: SharedClock,
    /// Servers a front end gave a session (ACP's `mcpServers`), by session.
    given: Mutex<HashMap<String, BTreeMap<String, McpServerConfig>>>,
    slots: Mutex<HashMap<SlotKey, Arc<tokio::sync::Mutex<Slot>>>>,
}

/// The MCP servers of this process.
#[derive(Debug, Clone)]
pub struct McpHub {
    inner: Arc<Inner>,
}

impl McpHub {
    /// A hub for the servers `configured` (`[mcp.servers]`), started without the
    /// variables `hidden_env` names and stopped with `grace` before SIGKILL.
    pub fn new(
        configured: BTreeMap<String, McpServerConfig>,
        hidden_env: Vec<String>,
        grace: Duration,
        clock: SharedClock,
    ) -> McpHub {
        McpHub {
            inner: Arc::new(Inner {
                configured,
                hidden_env,
                grace,
                clock,
                given: Mutex::new(HashMap::new()),
                slots: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Gives `session` the servers `servers` besides the configured ones (a server
    /// of the same name replaces the configured one for it). Servers running for
    /// the session under settings that changed are stopped.
    pub async fn give(&self, session: &str, servers: BTreeMap<String, McpServerConfig>) {
        self.inner
            .given
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(session.to_string(), servers);
        let wanted = self.inner.servers_for(session);
        for (key, slot) in self.inner.slots_of(session) {
            let mut slot = slot.lock().await;
            let stale = slot
                .server
                .as_ref()
                .is_some_and(|s| wanted.get(&key.1).is_none_or(|c| *c != s.config));
            if stale && let Some(server) = slot.server.take() {
                server.stop(self.inner.grace).await;
            }
        }
    }

    /// The servers `session` uses: the configured ones and those given to it.
    pub fn servers_for(&self, session: &str) -> BTreeMap<String, McpServerConfig> {
        self.inner.servers_for(session)
    }

    /// Starts what is not running of `session`'s servers (in `directory`) and
    /// offers their tools.
    pub async fn offer(&self, session: &str, directory: &Path) -> Offer {
        let servers = self.inner.servers_for(session);
        let started = futures_util::future::join_all(servers.keys().map(|name| {
            let inner = self.inner.clone();
            async move {
                (
                    name.clone(),
                    inner.instance(session, name, directory, true).await,
                )
            }
        }))
        .await;
        let mut offer = Offer::default();
        for (name, server) in started {
            let server = match server {
                Ok(server) => server,
                Err(error) => {
                    offer.unavailable.push(Unavailable {
                        server: name,
                        error,
                    });
                    continue;
                }
            };
            let timeout = Duration::from_millis(server.config.timeout_ms);
            for tool in &server.tools {
                let Some(offered) = offered_name(&name, &tool.name) else {
                    offer.unavailable.push(Unavailable {
                        server: name.clone(),
                        error: format!(
                            "has a tool `{}` that is not offered: `{name}__{}` would be longer than {MAX_TOOL_NAME} characters",
                            tool.name, tool.name
                        ),
                    });
                    continue;
                };
                if offer.tools.contains_key(&offered) {
                    offer.unavailable.push(Unavailable {
                        server: name.clone(),
                        error: format!(
                            "has a tool `{}` that is not offered: another of its tools is offered as `{offered}` already",
                            tool.name
                        ),
                    });
                    continue;
                }
                let spec = ToolSpec {
                    name: offered.clone(),
                    description: tool
                        .description
                        .as_deref()
                        .or(tool.title.as_deref())
                        .unwrap_or("")
                        .to_string(),
                    parameters: Value::Object((*tool.input_schema).clone()),
                };
                offer.tools.insert(
                    offered,
                    Arc::new(McpTool {
                        hub: self.inner.clone(),
                        session: session.to_string(),
                        server: name.clone(),
                        tool: tool.name.to_string(),
                        directory: directory.to_path_buf(),
                        spec,
                        timeout,
                    }),
                );
            }
        }
        offer
    }

    /// Stops every server (the engine shuts down), each with its grace, at once.
    pub async fn shutdown(&self) {
        let slots: Vec<_> = self
            .inner
            .slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
            .map(|(_, slot)| slot)
            .collect();
        let grace = self.inner.grace;
        futures_util::future::join_all(slots.into_iter().map(|slot| async move {
            if let Some(server) = slot.lock().await.server.take() {
                server.stop(grace).await;
            }
        }))
        .await;
    }

    /// The servers running now, by session and name.
    pub fn running(&self) -> Vec<RunningServer> {
        let slots: Vec<(SlotKey, Arc<tokio::sync::Mutex<Slot>>)> = self
            .inner
            .slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut running: Vec<RunningServer> = slots
            .into_iter()
            .filter_map(|((session, name), slot)| {
                // A slot being started or stopped right now is left out.
                let slot = slot.try_lock().ok()?;
                let server = slot.server.as_ref()?;
                Some(RunningServer {
                    session_id: session,
                    server: name,
                    pid: server.pid(),
                    group: server.identity().map(|p| p.pgid),
                    url: server.config.url.clone(),
                    tools: server.tools.len(),
                    since_ms: server.since_ms,
                })
            })
            .collect();
        running.sort_by(|a, b| (&a.session_id, &a.server).cmp(&(&b.session_id, &b.server)));
        running
    }

    /// Starts the server `name` as `config` says (in `directory`), lists its tools
    /// and stops it: whether it works (`steward doctor`).
    pub async fn probe(
        name: &str,
        config: &McpServerConfig,
        directory: &Path,
        hidden_env: &[String],
        grace: Duration,
    ) -> Result<Vec<String>, String> {
        let server = Server::start(name, config, directory, hidden_env, 0).await?;
        let tools = server.tools.iter().map(|t| t.name.to_string()).collect();
        server.stop(grace).await;
        Ok(tools)
    }
}

impl Inner {
    fn servers_for(&self, session: &str) -> BTreeMap<String, McpServerConfig> {
        let mut servers = self.configured.clone();
        if let Some(given) = self
            .given
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(session)
        {
            servers.extend(given.clone());
        }
        servers
    }

    fn slots_of(&self, session: &str) -> Vec<(SlotKey, Arc<tokio::sync::Mutex<Slot>>)> {
        self.slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|((s, _), _)| s == session)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    fn slot(&self, session: &str, name: &str) -> Arc<tokio::sync::Mutex<Slot>> {
        self.slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry((session.to_string(), name.to_string()))
            .or_default()
            .clone()
    }

    /// The running server `name` of `session`, started if it is not running (or
    /// died, or runs under settings that changed). A server that failed to start is
    /// not tried again for [`RETRY_AFTER`] when `patient` (a step's offer); a call
    /// always tries.
    async fn instance(
        &self,
        session: &str,
        name: &str,
        directory: &Path,
        patient: bool,
    ) -> Result<Arc<Server>, String> {
        let config = self
            .servers_for(session)
            .remove(name)
            .ok_or_else(|| "is not configured for this session".to_string())?;
        let fingerprint = super::fingerprint(&config);
        let slot = self.slot(session, name);
        let mut slot = slot.lock().await;
        if let Some(server) = slot.server.clone() {
            if server.fingerprint == fingerprint && server.is_alive().await {
                return Ok(server);
            }
            slot.server = None;
            server.stop(self.grace).await;
        }
        if patient
            && let Some((at, error, failed_with)) = &slot.failed
            && *failed_with == fingerprint
            && at.elapsed() < RETRY_AFTER
        {
            return Err(error.clone());
        }
        let now = self.clock.now_ms();
        match Server::start(name, &config, directory, &self.hidden_env, now).await {
            Ok(server) => {
                let server = Arc::new(server);
                slot.server = Some(server.clone());
                slot.failed = None;
                Ok(server)
            }
            Err(error) => {
                let error = format!("did not start: {error}");
                slot.failed = Some((Instant::now(), error.clone(), fingerprint));
                Err(error)
            }
        }
    }

    /// Stops `server` if it is still `session`'s server `name` (a call timed out,
    /// was cancelled or lost its connection): the next call starts it again.
    async fn discard(&self, session: &str, name: &str, server: &Arc<Server>, at_once: bool) {
        let slot = self.slot(session, name);
        let mut slot = slot.lock().await;
        if slot.server.as_ref().is_some_and(|s| Arc::ptr_eq(s, server)) {
            slot.server = None;
        }
        drop(slot);
        if at_once {
            server.kill().await;
        } else {
            server.stop(self.grace).await;
        }
    }
}

/// One tool of an MCP server, as offered to a session.
#[derive(Debug)]
struct McpTool {
    hub: Arc<Inner>,
    session: String,
    server: String,
    /// The tool's own name on the server.
    tool: String,
    directory: PathBuf,
    spec: ToolSpec,
    timeout: Duration,
}

impl Tool for McpTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    fn prepare(&self, ctx: &ToolContext, input: &Value) -> BoxFuture<Result<Prepared, String>> {
        let hub = self.hub.clone();
        let (session, name, tool) = (self.session.clone(), self.server.clone(), self.tool.clone());
        let directory = self.directory.clone();
        let timeout = self.timeout;
        let limit = ctx.config.output_limit_bytes;
        let input = input.clone();
        Box::pin(async move {
            let Value::Object(arguments) = input.clone() else {
                return Err("invalid arguments: an MCP tool takes a JSON object".into());
            };
            let server = hub
                .instance(&session, &name, &directory, false)
                .await
                .map_err(|e| format!("MCP server `{name}` {e}"))?;
            if !server.tools.iter().any(|t| t.name == tool) {
                return Err(format!(
                    "MCP server `{name}` no longer offers the tool `{tool}`"
                ));
            }
            let pending = server.call(&tool, arguments).await?;
            let call = McpCall {
                server: name.clone(),
                fingerprint: server.fingerprint.clone(),
                tool: tool.clone(),
                request_id: pending.request_id(),
                arguments: Some(input),
            };
            let process = server.identity().cloned();
            let prepared = Prepared::new(process, move |stop: StopSignals| {
                Box::pin(async move {
                    let id = pending.id();
                    let answer = pending.dispatch();
                    tokio::pin!(answer);
                    let unknown = |why: &str| {
                        format!(
                            "{why}; whether `{tool}` on MCP server `{name}` took effect is unknown"
                        )
                    };
                    tokio::select! {
                        answer = &mut answer => match answer {
                            Answer::Result(result) => output(result, limit),
                            Answer::Refused(error) => ToolOutput::Failed(format!(
                                "MCP server `{name}` refused the call: {error}"
                            )),
                            Answer::Lost(error) => {
                                hub.discard(&session, &name, &server, false).await;
                                ToolOutput::Failed(unknown(&format!(
                                    "the connection to MCP server `{name}` ended during the call ({error})"
                                )))
                            }
                        },
                        _ = tokio::time::sleep(timeout) => {
                            server.cancel(id, "timed out").await;
                            hub.discard(&session, &name, &server, false).await;
                            let stopped = if server.identity().is_some() {
                                "the server stopped"
                            } else {
                                "the connection closed"
                            };
                            ToolOutput::Failed(unknown(&format!(
                                "no answer within {} ms: the call was cancelled and {stopped}",
                                timeout.as_millis()
                            )))
                        }
                        _ = stop.cancel.cancelled() => {
                            server.cancel(id, "cancelled by the user").await;
                            hub.discard(&session, &name, &server, false).await;
                            ToolOutput::Stopped
                        }
                        _ = stop.abort.cancelled() => {
                            hub.discard(&session, &name, &server, true).await;
                            ToolOutput::Stopped
                        }
                    }
                })
            })
            .with_mcp(call);
            Ok(prepared)
        })
    }

    /// The runner's backstop: the call's own timeout, then the cancellation (at
    /// most a second) and the server's stop (its grace), and a margin.
    fn timeout(&self, ctx: &ToolContext, _input: &Value) -> Duration {
        self.timeout + Duration::from_millis(ctx.config.kill_grace_ms) + Duration::from_secs(3)
    }
}

/// A `tools/call` result as a tool's output: its text content (other content
/// named, not inlined), capped at `limit`; `isError` makes it a failure.
fn output(result: rmcp::model::CallToolResult, limit: usize) -> ToolOutput {
    let mut text = Vec::new();
    for block in &result.content {
        let block = serde_json::to_value(block).unwrap_or(Value::Null);
        let kind = block.get("type").and_then(Value::as_str).unwrap_or("");
        let field = |name: &str| block.get(name).and_then(Value::as_str).unwrap_or("");
        match kind {
            "text" => text.push(field("text").to_string()),
            "image" | "audio" => text.push(format!(
                "[{kind}: {}, {} bytes of base64]",
                field("mimeType"),
                field("data").len()
            )),
            "resource" => {
                let resource = block.get("resource").cloned().unwrap_or(Value::Null);
                match resource.get("text").and_then(Value::as_str) {
                    Some(inner) => text.push(inner.to_string()),
                    None => text.push(format!(
                        "[resource: {}]",
                        resource.get("uri").and_then(Value::as_str).unwrap_or("")
                    )),
                }
            }
            "resource_link" => text.push(format!("[resource link: {}]", field("uri"))),
            other => text.push(format!("[{other} content]")),
        }
    }
    let mut joined = text.join("\n");
    if joined.is_empty()
        && let Some(structured) = &result.structured_content
    {
        joined = structured.to_string();
    }
    let (joined, truncated) = cap_output(joined, limit);
    if result.is_error == Some(true) {
        return ToolOutput::Failed(joined);
    }
    let mut structured = json!({"truncated": truncated});
    if let Some(content) = result.structured_content {
        structured["structuredContent"] = content;
    }
    ToolOutput::Completed {
        output: joined,
        structured: Some(structured),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r4_16_tools_are_offered_as_server_double_underscore_tool() {
        assert_eq!(offered_name("notes", "add"), Some("notes__add".to_string()));
        assert_eq!(
            offered_name("notes", "files/read.v2"),
            Some("notes__files_read_v2".to_string())
        );
        assert_eq!(
            offered_name("notes", &"x".repeat(57)),
            Some(format!("notes__{}", "x".repeat(57)))
        );
        assert_eq!(offered_name("notes", &"x".repeat(58)), None);
        assert_eq!(offered_name("notes", ""), None);
    }

    #[test]
    fn r4_16_tools_allow_takes_a_name_or_a_servers_every_tool() {
        assert!(allows("notes__add", "notes__add"));
        assert!(!allows("notes__add", "notes__delete"));
        assert!(allows("notes__*", "notes__delete"));
        assert!(!allows("notes__*", "other__delete"));
        assert!(
            !allows("notes*", "notes__delete"),
            "only SERVER__* is a pattern"
        );
        assert!(!allows("*", "notes__delete"));
        assert!(allows("read_file", "read_file"));
    }
}
