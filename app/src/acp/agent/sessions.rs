//! `session/new`, `session/load` and `session/list`.

use super::*;

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
        if !request.mcp_servers.is_empty() {
            tracing::warn!(
                servers = request.mcp_servers.len(),
                "MCP servers are not supported: the session runs with Steward's own tools"
            );
        }
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
        // Its only event so far is its creation (seq 0).
        self.views.open_new(&session.id, 0);
        to_value(NewSessionResponse::new(session.id))
    }

    /// Sends the session's transcript, after reconciling what a crash elsewhere
    /// left of it. Its due wake starts after the answer ([`Agent::follow_up`]).
    pub(super) async fn load(&self, request: LoadSessionRequest) -> Result<Value, Failure> {
        let id = request.session_id.0.to_string();
        let loaded = async {
            if !self.engine.session_exists(&id).await? {
                return Err(Error::NotFound {
                    kind: "session",
                    id: id.clone(),
                });
            }
            self.engine.recover_if_due().await?;
            self.engine.transcript(&id).await
        }
        .await;
        let (messages, through) = match loaded {
            Ok(loaded) => loaded,
            Err(e) => {
                self.views.abandon_load(&id);
                return Err(engine_failure(e));
            }
        };
        self.views.finish_load(&id, &messages, through);
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
/// first, read through the connection's one reader (opened at its first use, so
/// the file is checked once, not at every list).
fn list_sessions(
    slot: &mut Option<steward_engine::inspect::Reader>,
    database: &Path,
    owners: &Path,
    cwd: Option<String>,
    cursor: Option<String>,
) -> Result<Value, Failure> {
    if slot.is_none() {
        *slot =
            Some(steward_engine::inspect::Reader::open(database, owners).map_err(engine_failure)?);
    }
    let reader = slot.as_mut().expect("opened above");
    if let Some(cursor) = &cursor
        && reader.session(cursor).map_err(engine_failure)?.is_none()
    {
        return Err((INVALID_PARAMS, format!("invalid cursor {cursor}")));
    }
    let mut page = PageRequest {
        after: cursor,
        // Narrows the pages read; the exact match is below.
        filter: cwd.clone(),
        ..PageRequest::first(LIST_PAGE)
    };
    let now = steward_engine::clock::SystemClock::new();
    let mut sessions = Vec::new();
    // With a cwd filter, keep reading pages until one is full or none are left.
    let more = loop {
        let rows = reader
            .sessions(steward_engine::clock::Clock::now_ms(&now), &page)
            .map_err(engine_failure)?;
        let full = rows.len() == LIST_PAGE;
        page.after = rows.last().map(|s| s.id.clone());
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
    let next = more.then(|| page.after.clone()).flatten();
    to_value(ListSessionsResponse::new(sessions).next_cursor(next))
}
