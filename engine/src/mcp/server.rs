//! One running MCP server: started (spawned under Steward's process code, or reached
//! over Streamable HTTP), initialized and listed within its startup limit; calls
//! sent through the dispatch gate ([`super::gate`]); stopped with a grace.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rmcp::RoleClient;
use rmcp::model::{
    CallToolRequestParams, CancelledNotificationParam, ClientCapabilities, ClientConfig,
    ClientRequest, Implementation, JsonObject, Request, RequestId, ServerResult,
};
use rmcp::service::{PeerRequestOptions, RequestHandle, RunningService, ServiceError, ServiceExt};
use rmcp::transport::async_rw::AsyncRwTransport;
use serde_json::Value;
use sha2::Digest;

use super::gate::{Gated, Gates};
use crate::config::McpServerConfig;
use crate::message::ProcessIdentity;
use crate::tools::process::ServerProcess;

/// The longest line a stdio server may write: a longer one ends the connection
/// ([`LineCap`]) instead of growing without bound (protocol §4.16).
const MAX_LINE: usize = 8 << 20;
/// The largest HTTP response or event an HTTP server may send.
const MAX_HTTP_BODY: usize = 8 << 20;

/// `sha256:` and the first 16 bytes, in hex, of what the server is — its command
/// and arguments or its URL, the names (not the values) of the variables and
/// headers it gets, its limits — as JSON: which server a recorded call went to,
/// without anything a value could be guessed back from (a variable's value may be a
/// short secret).
pub fn fingerprint(config: &McpServerConfig) -> String {
    let json = serde_json::to_vec(&serde_json::json!({
        "command": config.command,
        "args": config.args,
        "env": config.env.keys().collect::<Vec<_>>(),
        "url": config.url,
        "headers": config.headers.keys().collect::<Vec<_>>(),
        "timeout_ms": config.timeout_ms,
        "startup_timeout_ms": config.startup_timeout_ms,
    }))
    .unwrap_or_default();
    let digest = sha2::Sha256::digest(&json);
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

fn client_config() -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("steward", env!("CARGO_PKG_VERSION")),
    )
}

/// A started server.
#[derive(Debug)]
pub(crate) struct Server {
    pub name: String,
    pub fingerprint: String,
    pub config: McpServerConfig,
    pub tools: Vec<rmcp::model::Tool>,
    /// When it started (ms since the epoch).
    pub since_ms: i64,
    service: RunningService<RoleClient, ClientConfig>,
    gates: Arc<Gates>,
    process: tokio::sync::Mutex<Option<ServerProcess>>,
    identity: Option<ProcessIdentity>,
}

/// How a call sent to a server ended.
#[derive(Debug)]
pub(crate) enum Answer {
    /// The server answered with a result (which may report a tool error).
    Result(rmcp::model::CallToolResult),
    /// The server answered with a JSON-RPC error: the call was refused.
    Refused(String),
    /// The connection ended before an answer: whether the call took effect is
    /// unknown.
    Lost(String),
}

impl Server {
    /// Starts the server `name` in `cwd`: spawn or connect, `initialize`, and
    /// `tools/list` (retried once: listing has no effect), all within
    /// `startup_timeout_ms`. A process started for it is killed if it fails.
    pub async fn start(
        name: &str,
        config: &McpServerConfig,
        cwd: &Path,
        hidden_env: &[String],
        now_ms: i64,
    ) -> Result<Server, String> {
        let limit = Duration::from_millis(config.startup_timeout_ms);
        match tokio::time::timeout(limit, Self::connect(name, config, cwd, hidden_env, now_ms))
            .await
        {
            Ok(started) => started,
            Err(_) => Err(format!(
                "it did not start within {} ms (mcp.servers.{name}.startup_timeout_ms)",
                config.startup_timeout_ms
            )),
        }
    }

    async fn connect(
        name: &str,
        config: &McpServerConfig,
        cwd: &Path,
        hidden_env: &[String],
        now_ms: i64,
    ) -> Result<Server, String> {
        let gates = Arc::new(Gates::default());
        let (service, mut process) = match (&config.command, &config.url) {
            (Some(command), _) => {
                runnable(command, &config.env, cwd)?;
                let env: Vec<(String, String)> = config
                    .env
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                let (process, stdin, stdout) =
                    ServerProcess::spawn(command, &config.args, &env, cwd, hidden_env)
                        .await
                        .map_err(|e| format!("cannot run `{command}`: {e}"))?;
                let transport = AsyncRwTransport::new_client(LineCap::new(stdout), stdin)
                    .with_max_line_length(MAX_LINE);
                let served = client_config()
                    .serve(Gated::new(transport, gates.clone()))
                    .await;
                match served {
                    Ok(service) => (service, Some(process)),
                    Err(e) => {
                        let mut process = process;
                        // What the server said on its way out (and how it ended, in
                        // its wrapper's words) says why.
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        let tail = process.stderr_tail();
                        process.kill();
                        let mut message = format!("it did not initialize: {e}");
                        if !tail.is_empty() {
                            message.push_str(&format!("; it wrote: {}", last_lines(&tail)));
                        }
                        return Err(message);
                    }
                }
            }
            (None, Some(url)) => {
                let service = client_config()
                    .serve(Gated::new(http_transport(url, config)?, gates.clone()))
                    .await
                    .map_err(|e| {
                        format!("it did not initialize: {}", without_types(&e.to_string()))
                    })?;
                (service, None)
            }
            (None, None) => return Err("it has neither `command` nor `url`".into()),
        };
        let tools = match service.list_all_tools().await {
            Ok(tools) => tools,
            Err(_) => service
                .list_all_tools()
                .await
                .map_err(|e| format!("it did not list its tools: {e}"))?,
        };
        let identity = process.as_ref().map(|p| p.identity.clone());
        Ok(Server {
            name: name.to_string(),
            fingerprint: fingerprint(config),
            config: config.clone(),
            tools,
            since_ms: now_ms,
            service,
            gates,
            process: tokio::sync::Mutex::new(process.take()),
            identity,
        })
    }

    /// The server's process identity (its wrapper, which leads its group), for a
    /// stdio server.
    pub fn identity(&self) -> Option<&ProcessIdentity> {
        self.identity.as_ref()
    }

    /// The stdio server's own pid (not its wrapper's), while it runs.
    pub fn pid(&self) -> Option<i32> {
        let process = self.process.try_lock().ok()?;
        process.as_ref().map(ServerProcess::server_pid)
    }

    /// Whether the server can still take calls: its connection is open and, for a
    /// stdio server, its process has not exited.
    pub async fn is_alive(&self) -> bool {
        if self.service.is_closed() {
            return false;
        }
        let mut process = self.process.lock().await;
        match process.as_mut() {
            Some(process) => process.exited().is_none(),
            None => self.config.url.is_some(),
        }
    }

    /// Readies a `tools/call` of `tool` with `arguments`: the request is handed to
    /// the transport and held at its gate; nothing leaves until
    /// [`Pending::dispatch`]. Its request id is known from here on.
    pub async fn call(&self, tool: &str, arguments: JsonObject) -> Result<Pending, String> {
        let mut params = CallToolRequestParams::new(tool.to_string());
        params.arguments = Some(arguments);
        let handle = self
            .service
            .peer()
            .send_request_with_option(
                ClientRequest::CallToolRequest(Request::new(params)),
                PeerRequestOptions::no_options(),
            )
            .await
            .map_err(|e| format!("cannot send the call to MCP server `{}`: {e}", self.name))?;
        Ok(Pending {
            id: handle.id.clone(),
            handle: Some(handle),
            gates: self.gates.clone(),
        })
    }

    /// Tells the server the call `id` is cancelled (`notifications/cancelled`),
    /// waiting at most a second: the server may be the reason it ran long.
    pub async fn cancel(&self, id: RequestId, reason: &str) {
        let param = CancelledNotificationParam::new(Some(id), Some(reason.to_string()));
        let _ = tokio::time::timeout(
            Duration::from_secs(1),
            self.service.peer().notify_cancelled(param),
        )
        .await;
    }

    /// Stops the server: closes the connection (a stdio server's stdin ends) and,
    /// for a stdio server, waits for it to exit — SIGTERM, then SIGKILL, within
    /// `grace` ([`ServerProcess::stop`]).
    pub async fn stop(&self, grace: Duration) {
        self.service.cancellation_token().cancel();
        if let Some(mut process) = self.process.lock().await.take() {
            process.stop(grace).await;
        }
    }

    /// Kills a stdio server's process group at once.
    pub async fn kill(&self) {
        self.service.cancellation_token().cancel();
        if let Some(mut process) = self.process.lock().await.take() {
            process.kill();
        }
    }
}

/// A call handed to the transport and held at its gate. Dropped before
/// [`Pending::dispatch`], it is never sent.
#[derive(Debug)]
pub(crate) struct Pending {
    id: RequestId,
    handle: Option<RequestHandle<RoleClient>>,
    gates: Arc<Gates>,
}

impl Pending {
    /// The request id, as JSON.
    pub fn request_id(&self) -> Value {
        serde_json::to_value(&self.id).unwrap_or(Value::Null)
    }

    /// The request id.
    pub fn id(&self) -> RequestId {
        self.id.clone()
    }

    /// Lets the request out and waits for its answer.
    pub async fn dispatch(mut self) -> Answer {
        let Some(handle) = self.handle.take() else {
            return Answer::Lost("the call was already sent".into());
        };
        self.gates.open(&self.id);
        match handle.await_response().await {
            Ok(ServerResult::CallToolResult(result)) => Answer::Result(result),
            Ok(ServerResult::EmptyResult(_)) => Answer::Result(Default::default()),
            Ok(other) => Answer::Lost(format!(
                "the server answered with something other than a tool result: {}",
                serde_json::to_string(&other).unwrap_or_default()
            )),
            Err(ServiceError::McpError(e)) => Answer::Refused(e.message.to_string()),
            Err(e) => Answer::Lost(e.to_string()),
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if self.handle.is_some() {
            self.gates.close(&self.id);
        }
    }
}

/// A Streamable HTTP transport for `url` on the HTTP client Steward already uses.
fn http_transport(
    url: &str,
    config: &McpServerConfig,
) -> Result<rmcp::transport::StreamableHttpClientTransport<reqwest::Client>, String> {
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    // One process-wide TLS crypto provider; a second install is a no-op.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(30))
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
    let mut headers = std::collections::HashMap::new();
    for (name, value) in &config.headers {
        let name = reqwest::header::HeaderName::from_bytes(name.as_bytes())
            .map_err(|e| format!("header `{name}`: {e}"))?;
        let value = reqwest::header::HeaderValue::from_str(value)
            .map_err(|e| format!("header `{name}`: {e}"))?;
        headers.insert(name, value);
    }
    // A call whose session expired is not re-sent on a new one: `tools/call` is
    // never retried (protocol §4.16).
    let transport_config = StreamableHttpClientTransportConfig::with_uri(url.to_string())
        .custom_headers(headers)
        .reinit_on_expired_session(false)
        .max_sse_event_size(MAX_HTTP_BODY)
        .max_json_response_size(MAX_HTTP_BODY);
    Ok(rmcp::transport::StreamableHttpClientTransport::with_client(
        client,
        transport_config,
    ))
}

/// Checks that `command` names a program that can run: a path to an executable
/// file, or a name found on `PATH` (the server's own `PATH` when its `env` sets
/// one). What the shell would say instead ("not found", from the wrapper) is less
/// clear than this.
fn runnable(
    command: &str,
    env: &std::collections::BTreeMap<String, String>,
    cwd: &Path,
) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |path: &Path| {
        std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if command.contains('/') {
        let path = cwd.join(command);
        return if executable(&path) {
            Ok(())
        } else if path.exists() {
            Err(format!(
                "cannot run `{command}`: it is not an executable file"
            ))
        } else {
            Err(format!("cannot run `{command}`: no such file"))
        };
    }
    let path = env
        .get("PATH")
        .cloned()
        .or_else(|| std::env::var("PATH").ok())
        .unwrap_or_default();
    if std::env::split_paths(&path).any(|dir| executable(&cwd.join(dir).join(command))) {
        Ok(())
    } else {
        Err(format!("cannot run `{command}`: it is not on PATH"))
    }
}

/// A server's stdout that ends — reads as closed — once a line grows past
/// [`MAX_LINE`]: the connection ends with it (a call waiting on it ends as lost),
/// where the codec alone would drop the line and wait on.
#[derive(Debug)]
struct LineCap<R> {
    inner: R,
    line: usize,
    over: bool,
}

impl<R> LineCap<R> {
    fn new(inner: R) -> Self {
        LineCap {
            inner,
            line: 0,
            over: false,
        }
    }
}

impl<R: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for LineCap<R> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        if self.over {
            return std::task::Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        if let std::task::Poll::Ready(Ok(())) = &polled {
            let mut line = self.line;
            let mut over = false;
            for (i, b) in buf.filled()[before..].iter().enumerate() {
                if *b == b'\n' {
                    line = 0;
                } else {
                    line += 1;
                    if line > MAX_LINE {
                        // Nothing of the line past the limit is handed on.
                        buf.set_filled(before + i);
                        over = true;
                        break;
                    }
                }
            }
            self.line = line;
            if over {
                tracing::warn!(
                    "an MCP server wrote a line longer than {MAX_LINE} bytes: the connection ends"
                );
                self.over = true;
            }
        }
        polled
    }
}

/// `text` without the Rust type names an HTTP transport's errors carry.
fn without_types(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("Gated<") {
        out.push_str(&rest[..start]);
        let mut depth = 0;
        let mut end = rest.len();
        for (i, c) in rest[start..].char_indices() {
            match c {
                '<' => depth += 1,
                '>' => {
                    depth -= 1;
                    if depth == 0 {
                        end = start + i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = rest[end..].trim_start_matches(':').trim_start();
    }
    out.push_str(rest);
    out
}

/// The last few lines of `text`, on one line.
fn last_lines(text: &str) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let start = lines.len().saturating_sub(3);
    let joined = lines[start..].join(" / ");
    crate::tools::cap_output(joined, 600).0
}
