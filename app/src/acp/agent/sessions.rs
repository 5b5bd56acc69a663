//! `session/new`, `session/load` and `session/list`.

use super::*;
use steward_engine::config::McpServerConfig;

impl Agent {
    pub(super) async fn new_session(&self, request: NewSessionRequest) -> Result<Value, Failure> {
        let cwd = request.cwd;
        if !cwd.is_absolute() || !cwd.is_dir() {
            return Err((
                INVALID_PARAMS,
                format!(
                    "cwd {} is not an absolute path to a directory",
                    cwd.display()
                ),
            ));
        }
        let servers = mcp_servers(request.mcp_servers)?;
        let cwd = cwd
            .canonicalize()
            .map_err(|e| (INVALID_PARAMS, e.to_string()))?;
        let title = cwd
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| cwd.display().to_string());
        let session = self
            .engine
            .create_session(&title, &cwd.to_string_lossy())
            .await
            .map_err(engine_failure)?;
        self.engine.give_mcp_servers(&session.id, servers).await;
        self.offer_files(&session.id);
        // Its only event so far is its creation (seq 0).
        self.views.open_new(&session.id, 0, &cwd);
        to_value(NewSessionResponse::new(session.id))
    }

    /// Sends the session's transcript, after reconciling what a crash elsewhere
    /// left of it. Its due wake starts after the answer ([`Agent::follow_up`]).
    pub(super) async fn load(&self, request: LoadSessionRequest) -> Result<Value, Failure> {
        let id = request.session_id.0.to_string();
        let servers = match mcp_servers(request.mcp_servers) {
            Ok(servers) => servers,
            Err(e) => {
                self.views.abandon_load(&id);
                return Err(e);
            }
        };
        let loaded = async {
            if !self.engine.session_exists(&id).await? {
                return Err(Error::NotFound {
                    kind: "session",
                    id: id.clone(),
                });
            }
            // Before anything of it can run here (its wake starts after the answer).
            self.engine.give_mcp_servers(&id, servers).await;
            self.offer_files(&id);
            self.engine.recover_if_due().await?;
            let directory = self.engine.session_directory(&id).await?;
            let (messages, through) = self.engine.transcript(&id).await?;
            Ok((messages, through, directory))
        }
        .await;
        let (messages, through, directory) = match loaded {
            Ok(loaded) => loaded,
            Err(e) => {
                self.views.abandon_load(&id);
                return Err(engine_failure(e));
            }
        };
        self.views
            .finish_load(&id, &messages, through, directory.as_deref().map(Path::new));
        to_value(LoadSessionResponse::new())
    }

    /// Lists sessions through the connection's read-only reader, on a blocking
    /// thread: its SQLite reads (and, at its first use, the check of the file) never
    /// hold one of the runtime's workers.
    pub(super) async fn list(&self, request: ListSessionsRequest) -> Result<Value, Failure> {
        let cwd = request.cwd.as_deref().map(directory_key).transpose()?;
        let cwd = cwd.map(|c| c.to_string_lossy().into_owned());
        let (reader, database, owners) = (
            self.reader.clone(),
            self.database.clone(),
            self.owners.clone(),
        );
        tokio::task::spawn_blocking(move || {
            let mut slot = reader.lock().unwrap_or_else(|e| e.into_inner());
            list_sessions(&mut slot, &database, &owners, cwd, request.cursor)
        })
        .await
        .map_err(|e| (INTERNAL_ERROR, format!("listing sessions failed: {e}")))?
    }
}

/// A page of sessions (of `cwd`, when given) after `cursor`, most recently active
/// first, as `steward sessions` lists them: a session just prompted or woken comes
/// first. Read through the connection's one reader (opened at its first use, so
/// the file is checked once, not at every list). The cursor is the last listed
/// session's activity key, `<time_updated>/<id>`.
fn list_sessions(
    slot: &mut Option<steward_engine::inspect::Reader>,
    database: &Path,
    owners: &Path,
    cwd: Option<String>,
    cursor: Option<String>,
) -> Result<Value, Failure> {
    use steward_engine::inspect::pages::{PageRequest, session_key};
    let mut after = match &cursor {
        None => None,
        Some(cursor) => Some(
            cursor
                .split_once('/')
                .and_then(|(time, id)| Some(session_key(time.parse().ok()?, id)))
                .ok_or_else(|| (INVALID_PARAMS, format!("invalid cursor {cursor}")))?,
        ),
    };
    if slot.is_none() {
        *slot =
            Some(steward_engine::inspect::Reader::open(database, owners).map_err(engine_failure)?);
    }
    let reader = slot.as_mut().expect("opened above");
    let now = steward_engine::clock::SystemClock::new();
    let mut sessions = Vec::new();
    // With a cwd filter, keep reading pages until one is full or none are left.
    let more = loop {
        let rows = reader
            .recent_sessions(
                steward_engine::clock::Clock::now_ms(&now),
                &PageRequest {
                    after: after.clone(),
                    // Narrows the pages read; the exact match is below.
                    filter: cwd.clone(),
                    ..PageRequest::first(LIST_PAGE)
                },
                false,
            )
            .map_err(engine_failure)?;
        let full = rows.len() == LIST_PAGE;
        after = rows.last().map(|s| session_key(s.time_updated, &s.id));
        for s in rows {
            if cwd.as_ref().is_none_or(|c| *c == s.directory) {
                sessions.push(
                    SessionInfo::new(s.id, PathBuf::from(&s.directory))
                        .title(s.title)
                        .updated_at(rfc3339(s.time_updated)),
                );
            }
        }
        if sessions.len() >= LIST_PAGE || !full {
            break full;
        }
    };
    let next = more
        .then(|| after.map(|key| key.replacen(':', "/", 1)))
        .flatten();
    to_value(ListSessionsResponse::new(sessions).next_cursor(next))
}

/// The MCP servers a client gives a session, as Steward's settings: stdio and HTTP
/// (advertised in `mcpCapabilities`); SSE is refused. A client's names are made
/// into server names tools can be offered under (`SERVER__TOOL`): letters, digits,
/// `_` and `-`, no `__`, at most 32 characters, unique.
fn mcp_servers(
    servers: Vec<agent_client_protocol_schema::v1::McpServer>,
) -> Result<std::collections::BTreeMap<String, McpServerConfig>, Failure> {
    use agent_client_protocol_schema::v1::McpServer;
    let mut out = std::collections::BTreeMap::new();
    for server in servers {
        let (name, config) = match server {
            McpServer::Stdio(stdio) => (
                stdio.name,
                McpServerConfig {
                    command: Some(stdio.command.to_string_lossy().into_owned()),
                    args: stdio.args,
                    env: stdio.env.into_iter().map(|v| (v.name, v.value)).collect(),
                    ..McpServerConfig::default()
                },
            ),
            McpServer::Http(http) => (
                http.name,
                McpServerConfig {
                    url: Some(http.url),
                    headers: http
                        .headers
                        .into_iter()
                        .map(|h| (h.name, h.value))
                        .collect(),
                    ..McpServerConfig::default()
                },
            ),
            _ => {
                return Err((
                    INVALID_PARAMS,
                    "only stdio and http MCP servers are supported (mcpCapabilities)".into(),
                ));
            }
        };
        let name = server_name(&name, &out);
        config
            .validate(&name)
            .map_err(|e| (INVALID_PARAMS, format!("MCP server {name:?}: {e}")))?;
        out.insert(name, config);
    }
    Ok(out)
}

/// `name` as a server name (see [`mcp_servers`]), not yet in `taken`.
fn server_name(name: &str, taken: &std::collections::BTreeMap<String, McpServerConfig>) -> String {
    let mut base: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    while base.contains("__") {
        base = base.replace("__", "_");
    }
    let base = base.trim_matches('_').to_string();
    let base: String = if base.is_empty() {
        "mcp".into()
    } else {
        base.chars().take(McpServerConfig::MAX_NAME - 3).collect()
    };
    let mut candidate = base.clone();
    let mut n = 2;
    while taken.contains_key(&candidate) {
        candidate = format!("{base}-{n}");
        n += 1;
    }
    candidate
}
